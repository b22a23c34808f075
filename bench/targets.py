"""Targets the benchmarks run (imported in worker processes)."""


def noop(run):
    """A no-op attempt: completes at once with nothing."""
    return None
