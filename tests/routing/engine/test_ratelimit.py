"""A route's rate limit (routing.engine.ratelimit): the Events a route would take beyond its
limit within its period, by acceptance time, are dropped with the reason; the window slides; the
decisions do not depend on how the Events are cut into windows."""

from __future__ import annotations

import pytest

from causal.models import Event, RouteState
from routing.models import RateLimitTake, RouteRecord
from tests.routing.routerkit import accept, apply, router

DOCUMENT = """
version: 1
scopes:
  - path: acme
    bindings:
      inbox: {}
    routes:
      - slot: chat
        handler: match
        params: {type: "chat.*"}
        binding: inbox
        policy: queue
        rate_limit: {limit: 2, period: 1m, key: "{data.user}"}
      - slot: bulk
        handler: match
        params: {type: "bulk.*", keys: ["bulk:{data.n}"]}
        binding: inbox
        rate_limit: {limit: 3, period: 10s}
      - slot: free
        handler: match
        params: {type: "free.*"}
        binding: inbox
"""


def _decisions(seqs: list[int]) -> list[tuple[str, str]]:
    records = {r.event_id: r for r in RouteRecord.objects.filter(event_id__in=seqs)}
    return [(records[s].policy, records[s].reason) for s in seqs]


def _route(clock, *, limit: int | None = None) -> None:
    r = router(clock)
    try:
        for _ in range(100):
            if not r.route_pending(limit=limit):
                break
    finally:
        r.close()


@pytest.mark.django_db(transaction=True)
def test_a_route_over_its_rate_limit_drops_the_events_with_the_reason(clock):
    apply(clock, DOCUMENT)
    seqs = []
    for _ in range(5):
        seqs.append(accept(clock, "bulk.item", {"n": len(seqs)}).seq)
        clock.advance(1)
    _route(clock)
    decided = _decisions(seqs)
    assert [policy for policy, _ in decided] == ["start", "start", "start", "drop", "drop"]
    assert decided[3][1] == "rate limited: route 'bulk' in acme is over its rate limit 3 per 10 s"
    assert Event.objects.get(pk=seqs[4]).route_state == RouteState.ROUTED
    assert RouteRecord.objects.get(event_id=seqs[4]).work_id is None
    assert sorted(RateLimitTake.objects.values_list("event_seq", flat=True)) == seqs[:3]
