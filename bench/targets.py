"""Targets the benchmarks run (imported in worker processes)."""


def noop(run):
    """A no-op attempt: completes at once with nothing."""
    return None


def stamp(run):
    """Completes at once with the wall-clock time it was called (``bench/work_throughput.py
    --profile`` reads it: when the attempt's first call reached the target)."""
    import time

    return time.time()
