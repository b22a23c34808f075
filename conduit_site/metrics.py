"""``GET /metrics``: the Prometheus text exposition of every process's counters and histograms
(:mod:`infra.metrics`: web processes, route loops, work loops) and of gauges read from the
database at the scrape.

Counters and histograms (declared beside what they count):

- ``conduit_events_accepted_total{scope}`` (:mod:`causal.metrics`);
- ``conduit_events_routed_total{scope,policy}``, ``conduit_route_failures_total{code}``,
  ``conduit_events_rate_limited_total{scope,route}`` (Events dropped over a route's rate limit),
  ``conduit_route_latency_seconds`` (:mod:`routing.engine.metrics`);
- ``conduit_attempts_started_total``, ``…_completed_total``, ``…_failed_total``,
  ``…_parked_total`` and ``conduit_attempt_duration_seconds``, each ``{scope,binding}``
  (:mod:`worklife.metrics`);
- ``conduit_causal_refusals_total{kind}`` (:mod:`causal.metrics`);
- ``conduit_schedule_fires_total{outcome}`` (:mod:`routing.schedules`).

Gauges, read when scraped (:class:`DatabaseGauges`, a few indexed queries): the backlog
(``conduit_events_unrouted``, ``conduit_events_unrouted_oldest_seconds``), the loops'
heartbeats (``conduit_loop_heartbeat_age_seconds{loop}``, ``conduit_loops_alive{loop}``),
``conduit_attempts_running``, ``conduit_work_parked``, the ready Work held
(``conduit_work_flow_held{kind}``: flow control's kinds, and ``pause`` for Work a paused scope or
binding holds), ``conduit_events_held_by_pause`` (Events a paused route holds unrouted),
``conduit_pauses_in_force{kind}`` and ``conduit_database_up``.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import Error as DatabaseError

from causal.clock import system_clock
from causal.models import Event, RouteState
from conduit_site.doctor import loop_heartbeats
from infra.metrics import multiprocess_directory
from infra.private_files import private_directory
from worklife.flow import flow_holds_by_kind
from worklife.models import ACTIVE_ATTEMPT_STATES, Attempt, PauseKind, Work, WorkStatus
from worklife.pauses import ROUTE_HOLD_PREFIX, active_pauses, paused_work_q
from worklife.selectors import work_parked


def authorized(header: str) -> bool:
    """Whether an ``Authorization`` header value may read the metrics: any when no token is
    set (``CONDUIT_METRICS`` on without one), else ``Bearer <CONDUIT_METRICS_TOKEN>``."""
    token = settings.CONDUIT_METRICS_TOKEN
    if not token:
        return True
    scheme, _, offered = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(offered.strip().encode(), token.encode())


class DatabaseGauges:
    """A collector of the gauges read from the database at each scrape."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        now = system_clock()
        try:
            unrouted = Event.objects.filter(route_state=RouteState.UNROUTED)
            backlog = unrouted.count()
            oldest = unrouted.order_by("seq").values_list("accepted_at", flat=True).first()
            loops = loop_heartbeats(now=now)
            running = Attempt.objects.filter(state__in=ACTIVE_ATTEMPT_STATES).count()
            parked = work_parked().count()
            held = flow_holds_by_kind(now)
            pauses = active_pauses(now)
            held_q = paused_work_q(pauses)
            held_work = (
                Work.objects.filter(held_q, status=WorkStatus.READY, parked_at__isnull=True).count()
                if held_q is not None
                else 0
            )
            held_events = (
                unrouted.filter(unrouted_reason__startswith=ROUTE_HOLD_PREFIX).count()
                if any(p.kind == PauseKind.ROUTE for p in pauses)
                else 0
            )
        except DatabaseError:
            yield GaugeMetricFamily("conduit_database_up", "Whether the database answered the scrape.", 0)
            return
        yield GaugeMetricFamily("conduit_database_up", "Whether the database answered the scrape.", 1)
        yield GaugeMetricFamily(
            "conduit_events_unrouted",
            "Events accepted and not routed yet (the backlog; backing off and waiting ones included).",
            backlog,
        )
        yield GaugeMetricFamily(
            "conduit_events_unrouted_oldest_seconds",
            "Seconds since the oldest unrouted Event was accepted (0 without a backlog).",
            max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0,
        )
        age = GaugeMetricFamily(
            "conduit_loop_heartbeat_age_seconds",
            "Seconds since the newest heartbeat of a loop of each kind (absent: none ever wrote one).",
            labels=("loop",),
        )
        alive = GaugeMetricFamily(
            "conduit_loops_alive",
            "Loops of each kind with a heartbeat newer than 60 seconds (doctor's limit).",
            labels=("loop",),
        )
        for loop, beats in loops.items():
            if beats.age_seconds is not None:
                age.add_metric((loop,), beats.age_seconds)
            alive.add_metric((loop,), beats.alive)
        yield age
        yield alive
        yield GaugeMetricFamily("conduit_attempts_running", "Attempts running or waiting now.", running)
        yield GaugeMetricFamily(
            "conduit_work_parked", "Work parked after too many failures, waiting for an operator.", parked
        )
        holds = GaugeMetricFamily(
            "conduit_work_flow_held",
            "Ready Work held now, by kind: flow control's (concurrency, throttle, debounce, batch) and"
            " an operator's pause of its scope or binding (pause).",
            labels=("kind",),
        )
        for kind, n in held.items():
            holds.add_metric((kind,), n)
        holds.add_metric(("pause",), held_work)
        yield holds
        yield GaugeMetricFamily(
            "conduit_events_held_by_pause",
            "Events a paused route holds unrouted now (they route on resume, in order).",
            held_events,
        )
        in_force = GaugeMetricFamily("conduit_pauses_in_force", "Pauses in force, by kind.", labels=("kind",))
        for kind in PauseKind.values:
            in_force.add_metric((kind,), sum(1 for p in pauses if p.kind == kind))
        yield in_force


class _ThisProcess:
    """The metrics of the answering process alone (no ``PROMETHEUS_MULTIPROC_DIR``)."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client import REGISTRY

        yield from REGISTRY.collect()


def exposition(accept: str = "") -> tuple[bytes, str]:
    """The exposition and its content type: every process's counters and histograms (the
    multiprocess folder's files, else this process's) and the database gauges. In the
    Prometheus text format 0.0.4, which every Prometheus reads, unless ``accept`` (the
    scrape's ``Accept``) asks for OpenMetrics or a later text format."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import choose_encoder
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    directory = multiprocess_directory()
    if directory:
        # Before any process wrote a value, the folder may not be there yet.
        MultiProcessCollector(registry, path=str(private_directory(directory)))
    else:
        registry.register(_ThisProcess())
    registry.register(DatabaseGauges())
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type
