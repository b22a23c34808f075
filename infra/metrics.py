"""A process's Prometheus metrics (``prometheus_client``), recorded only when
``settings.CONDUIT_METRICS`` is on.

Apps declare their counters and histograms with :class:`Counter` and :class:`Histogram`: a
handle that builds the ``prometheus_client`` metric on its first use, so that a process with
metrics off never imports ``prometheus_client`` and a recording costs it one settings lookup.

**Several processes.** ``manage.py serve`` runs web processes, a route loop and a work loop;
each counts what it does. With ``PROMETHEUS_MULTIPROC_DIR`` in a process's environment (set
before the process starts: ``prometheus_client`` reads it when it is imported), the process
writes its values to files of its own in that folder, and ``/metrics`` adds up the files of
every process, the dead ones' included (a counter never goes back) —
``prometheus_client``'s multiprocess mode. Its files are named by host and pid
(``counter_web-1.db``), not by pid alone, so that containers of several hosts may share one
folder (a volume): each container's first process is pid 1. Without it, a process's values live in its memory
and ``/metrics`` shows the answering process's alone. Only counters and histograms are kept
this way; gauges (the backlog, heartbeat ages) are read from the database when scraped.

**Cost.** A hot path records once per batch, not once per Event: :meth:`Histogram.observe_many`
sorts a batch's values into the buckets and adds each bucket's count with one write, and
:meth:`Histogram.add_bucketed` takes counts a database query bucketed.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import re
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings

from infra.identity import host_name
from infra.private_files import private_directory

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

logger = logging.getLogger("conduit.metrics")

_lock = threading.Lock()
_files_named = False


def enabled() -> bool:
    """Whether this process records metrics (``CONDUIT_METRICS``)."""
    return bool(getattr(settings, "CONDUIT_METRICS", False))


def multiprocess_directory() -> str | None:
    """The folder this process writes its metrics to, or ``None`` (kept in memory)."""
    return os.environ.get(MULTIPROC_ENV) or None


def process_identifier(pid: int) -> str:
    """What names process ``pid``'s files in the multiprocess folder: this host's name and the
    pid (distinct for processes running at once on hosts sharing the folder)."""
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', host_name())}-{pid}"


def _name_files_by_host() -> None:
    """Make ``prometheus_client`` name this process's files by :func:`process_identifier`, when
    it keeps its values in files (it chose that mode from the environment when imported)."""
    from prometheus_client import values

    if not getattr(values.ValueClass, "_multiprocess", False):
        return
    prefix = process_identifier(0).removesuffix("-0")
    values.ValueClass = values.MultiProcessValue(lambda: f"{prefix}-{os.getpid()}")


class _Handle:
    """A metric declared at import and built on first use (see the module)."""

    kind = ""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), **options: Any) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.options = options
        self._metric: Any = None
        self._children: dict[tuple[str, ...], Any] = {}
        self._unavailable = False

    @property
    def metric(self) -> Any:
        """The ``prometheus_client`` metric, built (and registered) once per process."""
        if self._metric is None:
            with _lock:
                if self._metric is None:
                    self._metric = self._build()
        return self._metric

    def _build(self) -> Any:
        import prometheus_client

        directory = multiprocess_directory()
        if directory:
            # The folder may be new (a first start) or emptied: the values' files go there.
            private_directory(directory)
            global _files_named
            if not _files_named:
                _name_files_by_host()
                _files_named = True
        # No ``*_created`` series: multiprocess mode has none, so every mode shows the same.
        prometheus_client.disable_created_metrics()
        cls = getattr(prometheus_client, self.kind)
        return cls(self.name, self.documentation, self.labelnames, **self.options)

    def child(self, *labelvalues: str) -> Any:
        """The metric's child for these label values (cached: ``labels()`` checks each call);
        ``None`` when the metric cannot be kept (its folder cannot be written): a metric never
        fails what it counts, it is logged once and dropped."""
        child = self._children.get(labelvalues)
        if child is None:
            if self._unavailable:
                return None
            try:
                metric = self.metric
                child = metric.labels(*labelvalues) if self.labelnames else metric
            except OSError as error:
                self._unavailable = True
                logger.warning("metrics.unavailable", extra={"metric": self.name, "error": str(error)})
                return None
            self._children[labelvalues] = child
        return child


class Counter(_Handle):
    """A counter: ``inc(amount, *labelvalues)``."""

    kind = "Counter"

    def inc(self, amount: float = 1, *labelvalues: str) -> None:
        if amount and enabled() and (child := self.child(*labelvalues)) is not None:
            child.inc(amount)

    def inc_counts(self, counts: dict[tuple[str, ...], int]) -> None:
        """Add each count to the child of its label values (one write per child)."""
        if counts and enabled():
            for labelvalues, amount in counts.items():
                if amount and (child := self.child(*labelvalues)) is not None:
                    child.inc(amount)


class Histogram(_Handle):
    """A histogram with fixed ``buckets`` (upper bounds, in seconds)."""

    kind = "Histogram"

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str] = (), *, buckets: Sequence[float]
    ):
        super().__init__(name, documentation, labelnames, buckets=tuple(buckets))
        self.bounds = sorted(float(b) for b in buckets)

    def observe(self, value: float, *labelvalues: str) -> None:
        if enabled() and (child := self.child(*labelvalues)) is not None:
            child.observe(value)

    def observe_many(self, values: Iterable[float], *labelvalues: str) -> None:
        """Observe every value of ``values``: the same result as ``observe`` for each, with one
        write per bucket reached and one for the sum (a window of the route loop's hundreds of
        Events costs a few writes, not two per Event)."""
        if not enabled():
            return
        ordered = sorted(values)
        # observe() puts a value in the first bucket whose bound is at or above it: the values
        # at most a bound are those before its place on the right of equal ones.
        cumulative = [bisect.bisect_right(ordered, bound) for bound in self.bounds]
        self.add_bucketed(len(ordered), math.fsum(ordered), cumulative, *labelvalues)

    def add_bucketed(self, count: int, total: float, cumulative: Sequence[int], *labelvalues: str) -> None:
        """Observe ``count`` values summing to ``total`` of which ``cumulative[i]`` were at most
        ``bounds[i]`` (counted elsewhere, e.g. by the database): the same result as ``observe``
        for each."""
        if not count or not enabled():
            return
        counts: dict[int, int] = {}
        below = 0
        for index, at_most in enumerate([*cumulative, count]):
            if at_most > below:
                counts[index] = at_most - below
                below = at_most
        self._add(counts, total, labelvalues)

    def _add(self, counts: dict[int, int], total: float, labelvalues: tuple[str, ...]) -> None:
        child = self.child(*labelvalues) if counts else None
        if child is None:
            return
        # prometheus_client keeps a histogram as one value per bucket and one for the sum
        # (Histogram._buckets, ._sum); tests/infra/test_metrics.py checks that this matches
        # observe() value by value, so a change of that layout fails there.
        for index, count in counts.items():
            child._buckets[index].inc(count)
        child._sum.inc(total)


# --- serve's side: the folder its children share ----------------------------------------------


def prepare_children_directory(var_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The environment serve's children need to share their metrics: ``{}`` with metrics off;
    with ``PROMETHEUS_MULTIPROC_DIR`` set already, that folder as it is (its owner, e.g. a
    service manager, empties it); else ``<var>/metrics``, emptied of earlier runs' files now,
    before any child writes one."""
    if not enabled():
        return {}
    given = multiprocess_directory()
    if given:
        private_directory(given)
        return {MULTIPROC_ENV: given}
    directory = private_directory(Path(var_dir) / "metrics")
    for stale in directory.glob("*.db"):
        stale.unlink(missing_ok=True)
    return {MULTIPROC_ENV: str(directory)}


def process_exited(pid: int, environment: dict[str, str]) -> None:
    """Forget what a child that exited kept as live gauges (``mark_process_dead``); its counters
    stay, counted once."""
    directory = environment.get(MULTIPROC_ENV)
    if not directory:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(process_identifier(pid), directory)
