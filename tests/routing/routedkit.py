"""Events the real router decided, one of each outcome, for the tests that read routes (R29)."""

from __future__ import annotations

from causal.limits import Causal
from causal.models import Event
from causal.services import Envelope
from routing.models import RouteRecord
from tests.routing.routerkit import accept, apply, drain, router

REFUSALS = [
    {"route": "pr", "reason": "type other.thing does not match github.pull_request.*"},
    {"route": "chat", "reason": "type other.thing does not match chat.message"},
    {"route": "ops", "reason": "type other.thing does not match ops.*"},
    {"route": "follow-up", "reason": "type other.thing does not match followup.*"},
    {"route": "noise", "reason": "type other.thing does not match noise.*"},
    {"route": "scripted", "reason": "type other.thing does not start with x"},
]


def route_all(clock) -> None:
    r = router(clock)
    try:
        drain(r)
    finally:
        r.close()


def pr(clock, number=1, **fields):
    return accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": number}, **fields)


class History:
    """Events the real router decided: started, unmatched (with refusals), failed (given up
    at once), unrouted with a counted failure, unrouted waiting behind it, and a derived
    follow-up queued on the started Work."""

    def __init__(self, clock) -> None:
        apply(clock)
        self.started = pr(clock)
        self.unmatched = accept(clock, "other.thing", {})
        self.failed = accept(clock, "x.bad", {"behaviour": "invalid"})
        self.failing = accept(clock, "x.fail", {"behaviour": "fail"}, correlation=["k:1"])
        self.behind = accept(clock, "x.ok", {}, correlation=["k:1"])
        self.child = (
            Causal(clock)
            .derive(
                parent=self.started,
                envelope=Envelope(
                    id="child-1",
                    source="tests",
                    type="followup.comment",
                    scope="acme",
                    data={"repo": "acme/api", "number": 1},
                ),
            )
            .event
        )
        route_all(clock)
        for event in self.events:
            event.refresh_from_db()
        self.work_id = RouteRecord.objects.get(event=self.started).work_id

    @property
    def events(self) -> list[Event]:
        return [self.started, self.unmatched, self.failed, self.failing, self.behind, self.child]
