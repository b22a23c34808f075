"""The console's Event list: its total counts Events with the noun in the right number."""

from __future__ import annotations

import html as html_text
import io
import re
from datetime import UTC, datetime

import pytest
from django.core.management import call_command

from routing.engine.decide import Reason
from tests.causal.factories import EventFactory
from tests.routing.factories import RouteRecordFactory, UserFactory
from tests.routing.routerkit import accept, apply, drain, router
from tests.worklife.factories import WorkFactory
from worklife.lifecycle import work_cancel

pytestmark = pytest.mark.django_db


def test_the_events_list_counts_one_event_in_the_singular(client):
    client.force_login(UserFactory())
    EventFactory()

    page = client.get("/events/").content.decode()

    total = re.search(r'<span class="pager-total">([^<]*)</span>', page)[1]
    assert total == "1 Event"


# The Event page says in words why its Event went where it went: dropped
# because its Work had already ended (when, in what state), held behind earlier input, queued by
# a fallback, dropped by a route, unmatched…
ENDED = datetime(2026, 1, 5, 10, 2, 4, tzinfo=UTC)


def why(client, seq: int) -> str:
    """The Event page's sentence about its route, as text (its ``<time>`` as the server writes it)."""
    client.force_login(UserFactory())
    html = client.get(f"/events/{seq}/").content.decode()
    match = re.search(r'<p id="event-route-why" class="route-why">(.*?)</p>', html, re.S)
    assert match, html
    return html_text.unescape(re.sub(r"<[^>]+>", "", match.group(1)))


def test_late_input_of_completed_work_names_the_work_and_when_it_completed(client):
    work = WorkFactory(status="completed", ended_at=ENDED)
    record = RouteRecordFactory(work=work, policy="drop", reason=Reason.TERMINAL)
    said = (
        f"Work #{work.id} had already completed at 2026-01-05 10:02:04 UTC, so this input was dropped "
        "(policy: drop when terminal)."
    )

    assert why(client, record.event_id) == said
    out = io.StringIO()
    call_command("events", "get", str(record.event_id), stdout=out)
    assert out.getvalue().splitlines()[-1] == f"  why: {said}"


@pytest.mark.django_db(transaction=True)
def test_late_input_of_cancelled_work_routed_for_real_says_it_was_cancelled(client, clock, test_handlers):
    apply(clock)
    first = accept(clock, "github.pull_request.opened", {"repo": "acme/api", "number": 9})
    drain(router(clock))
    first.refresh_from_db()
    work_cancel(work_id=first.route_record.work_id, clock=clock)
    late = accept(clock, "github.pull_request.synchronize", {"repo": "acme/api", "number": 9})
    drain(router(clock))

    text = why(client, late.seq)
    assert text.startswith(f"Work #{first.route_record.work_id} had already been cancelled at ")
    assert text.endswith(", so this input was dropped (policy: drop when terminal).")


def test_an_unrouted_event_says_what_earlier_input_it_is_held_behind(client):
    work = WorkFactory()
    earlier = EventFactory(work_id=work.id)
    event = EventFactory(
        work_id=work.id, waiting_on=earlier, unrouted_reason=f"waiting behind earlier input #{earlier.seq}"
    )

    assert why(client, event.seq) == (
        f"Held behind Work #{work.id}'s earlier input #{earlier.seq}, which is not routed yet: this Event "
        "routes once that one settles."
    )


def test_held_for_a_running_attempt_says_why_it_waits(client):
    work = WorkFactory(status="running")
    record = RouteRecordFactory(
        work=work,
        policy="held",
        reason="held until the attempt ends: attempt runs binding a, route selects b",
    )

    assert why(client, record.event_id) == (
        f"Held for Work #{work.id}: its running attempt cannot take it yet (attempt runs binding a, route "
        "selects b), so it waits for that attempt to end."
    )


@pytest.mark.parametrize(
    ("policy", "reason", "said"),
    [
        (
            "queue",
            "fallback queue: attempt's pinned capabilities lack inject",
            "Work #{w}'s running attempt could not take it (attempt's pinned capabilities lack inject), so it "
            "was queued for the next attempt (fallback: queue).",
        ),
        (
            "drop",
            "fallback drop: attempt's pinned capabilities lack interrupt",
            "Work #{w}'s running attempt could not take it (attempt's pinned capabilities lack interrupt), so it "
            "was dropped (fallback: drop).",
        ),
        (
            "queue",
            "type a matches a.*",
            "Queued as input of Work #{w} through route prs: its next attempt takes it.",
        ),
        ("start", "type a matches a.*", "It started Work #{w} through route prs (binding agent)."),
        (
            "queue",
            Reason.CONTEXT,
            "Work #{w} was waiting, so it was kept as context: the wait, not this input, decides when it runs.",
        ),
        (
            "inject",
            "",
            "Given to Work #{w}'s running attempt while it runs, through route prs (policy: inject).",
        ),
        (
            "interrupt",
            "",
            "It interrupted Work #{w}'s running attempt, through route prs (policy: interrupt).",
        ),
        (
            "wake",
            "wins wait review",
            "Work #{w} was waiting for it: it won the wait review and woke the Work.",
        ),
    ],
)
def test_each_route_reason_reads_as_a_sentence_naming_the_work(client, policy, reason, said):
    work = WorkFactory(status="running")
    record = RouteRecordFactory(work=work, policy=policy, reason=reason)

    assert why(client, record.event_id) == said.format(w=work.id)


def test_a_route_drop_an_unmatched_and_a_no_work_event_say_so(client):
    dropped = RouteRecordFactory(
        route="noise", binding="", policy="drop", reason="type a.ping matches *.ping"
    )
    unmatched = RouteRecordFactory(route="", binding="", policy="unmatched", reason=Reason.NO_MATCH)
    no_work = RouteRecordFactory(route="notes", policy="unmatched", reason=Reason.NO_WORK, keys=["note:x"])

    assert (
        why(client, dropped.event_id) == "Dropped by route noise (policy: drop): type a.ping matches *.ping."
    )
    assert (
        why(client, unmatched.event_id)
        == "No route matched, so nothing took it: each route's refusal is listed."
    )
    assert why(client, no_work.event_id) == (
        "Route notes matched, but it starts no Work and no Work holds note:x, so this input was dropped "
        "(start: false)."
    )


def test_the_wording_reads_the_codes_decide_writes():
    from routing.engine import decide
    from routing.records import explain

    for name in ("START", "QUEUE", "INJECT", "INTERRUPT", "HELD", "DROP", "WAKE", "UNMATCHED"):
        assert getattr(explain.Effect, name) == getattr(decide.Effect, name)
    for name in ("TERMINAL", "ADDRESSED", "CONTEXT", "NO_WORK"):
        assert getattr(explain.Reason, name) == getattr(decide.Reason, name)


def test_skipped_and_given_up_events_say_who_and_how_often(client):
    skipped = RouteRecordFactory(
        event__route_state="skipped", policy="skipped", disposition="skipped", decided_by="ada"
    )
    failed = RouteRecordFactory(
        event__route_state="failed",
        policy="error",
        reason="handler_failed",
        disposition="failed",
        attempts=5,
        route="prs",
    )

    assert why(client, skipped.event_id) == "ada skipped it before it was routed: nothing took it."
    assert why(client, failed.event_id) == (
        "Routing it failed on route prs (handler_failed) 5 times and was given up on: nothing took it "
        "(reroute it to try again)."
    )
