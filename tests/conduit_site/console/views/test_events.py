"""The console's Event list: its total counts Events with the noun in the right number."""

from __future__ import annotations

import html as html_text
import io
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from causal.models import RouteState
from controls import events as controls
from routing.engine.decide import Effect, Reason
from routing.records.selectors import UNDELIVERED_OUTCOMES
from tests.causal.factories import EventFactory
from tests.conduit_site.console.views.consolekit import (
    CAP_T0,
    HTMX,
    count_queries,
    htmx,
    part,
    row_seqs,
    text,
)
from tests.routing import sample_handlers
from tests.routing.factories import RouteRecordFactory, UserFactory, live_scopes
from tests.routing.routedkit import REFUSALS
from tests.routing.routerkit import accept, apply, drain, router
from tests.worklife.factories import CorrelationKeyFactory, WorkFactory
from worklife.lifecycle import work_cancel_in_tx

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
    work_cancel_in_tx(work_id=first.route_record.work_id, clock=clock)
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


# --- the Event list and page (D4) -----------------------------------------------------------------


def test_d4_event_list_filters_by_scope_type_and_route_state(signed_in):
    EventFactory(scope="acme", type="github.push", envelope_id="keep-me")
    EventFactory(scope="acme", type="github.issue", envelope_id="other-type")
    EventFactory(scope="acme/web", type="github.push", envelope_id="other-scope")
    routed = EventFactory(scope="acme", type="github.push", route_state=RouteState.ROUTED)
    RouteRecordFactory(event=routed, policy="drop")

    def seqs(**params):
        response = signed_in.get(reverse("event-list"), params)
        assert response.status_code == 200
        return [int(s) for s in re.findall(r'<tr id="event-(\d+)">', text(response))]

    everything = seqs()
    assert len(everything) == 4 and everything == sorted(everything, reverse=True)
    only = seqs(scope="acme", type="github.push", route_state="unrouted")
    assert len(only) == 1
    assert seqs(scope="acme", type="github.push") == [routed.seq, only[0]]
    assert seqs(route_state="routed") == [routed.seq]
    assert seqs(scope="nowhere") == []


def test_the_event_list_s_empty_time_filters_read_as_any_time(signed_in):
    """The empty Since and Until fields showed a date of January 2026 as their placeholder,
    which read as a filter already set; like the other fields they say "any" first."""
    body = text(signed_in.get(reverse("event-list")))
    placeholders = dict(re.findall(r'name="(since|until)"[^>]*placeholder="([^"]*)"', body))
    assert all(value.startswith("any, or ") for value in placeholders.values()), placeholders
    assert set(placeholders) == {"since", "until"}


def test_d4_event_list_bad_filter_names_the_field(signed_in):
    response = signed_in.get(reverse("event-list"), {"route_state": "lost", "before": "x"})
    assert response.status_code == 400
    body = text(response)
    assert "route_state: Select a valid choice" in body
    assert "before: Enter a whole number" in body


def test_d4_event_list_pages_by_seq_fifty_at_a_time(signed_in):
    events = EventFactory.create_batch(60, scope="acme")
    first = signed_in.get(reverse("event-list"), {"scope": "acme"})
    rows = [int(s) for s in re.findall(r'<tr id="event-(\d+)">', text(first))]
    assert rows == [e.seq for e in reversed(events)][:50]
    next_url = re.search(r'<a href="([^"]+)" hx-get="[^"]+"[^>]*rel="next"', text(first)).group(1)
    assert next_url == f"{reverse('event-list')}?scope=acme&amp;before={rows[-1]}"

    second = signed_in.get(reverse("event-list"), {"scope": "acme", "before": rows[-1]})
    rest = [int(s) for s in re.findall(r'<tr id="event-(\d+)">', text(second))]
    assert rest == [e.seq for e in reversed(events)][50:]
    assert 'rel="next"' not in text(second)
    # A later page stays live on its own page.
    assert 'ws-connect="/ws/events/?scope=acme&amp;outbox=' in text(first)
    assert f'ws-connect="/ws/events/?scope=acme&amp;before={rows[-1]}&amp;outbox=' in text(second)


def test_d4_event_list_htmx_request_gets_only_the_partial(signed_in):
    EventFactory(type="only.partial")
    response = signed_in.get(reverse("event-list"), {"type": "only.partial"}, **htmx("event-list"))
    body = text(response)
    assert response.status_code == 200
    assert "<html" not in body and "<form" not in body
    assert body.strip().startswith('<section id="event-list"')
    assert 'ws-connect="/ws/events/?type=only.partial&amp;outbox=' in body
    assert "only.partial" in body
    assert "HX-Request" in response["Vary"]
    # The same URL without htmx is the whole page.
    assert "<html" in text(signed_in.get(reverse("event-list"), {"type": "only.partial"}))


def test_d4_event_page_shows_envelope_state_ancestry_and_route(signed_in):
    root = EventFactory(type="root.event")
    parent = EventFactory(type="parent.event", parent=root, root=root, depth=1)
    event = EventFactory(
        envelope_id="env-42",
        source="github.com/acme",
        type="github.pull_request.opened",
        subject="pr/42",
        data={"number": 42, "repository": "acme/web", "nested": {"draft": False}},
        extensions={"traceparent": "00-abc"},
        scope="acme/web",
        correlation=["pr:acme/web#42"],
        parent=parent,
        root=root,
        depth=2,
        route_state=RouteState.ROUTED,
        unrouted_reason="",
    )
    work = WorkFactory()
    RouteRecordFactory(
        event=event,
        work=work,
        policy="unmatched",
        reason="no_match",
        route="",
        refusals=[
            {
                "route": "prs",
                "scope": "acme",
                "reason": "type github.issue does not match github.pull_request.*",
            },
            {"route": "chat", "scope": "acme", "reason": "data.thread is missing"},
        ],
        error="",
        attempts=2,
    )
    body = text(signed_in.get(reverse("event-detail", args=[event.seq])))
    for value in (
        "env-42",
        "github.com/acme",
        "github.<wbr>pull_request.<wbr>opened",  # wraps at dots
        "pr/42",
        "acme/web",
        "pr:acme/web#42",
        "&quot;traceparent&quot;: &quot;00-abc&quot;",
    ):
        assert value in body
    # Data pretty-printed (indented, keys sorted).
    assert "{\n  &quot;nested&quot;: {\n    &quot;draft&quot;: false\n  },\n  &quot;number&quot;: 42," in body
    assert f'href="{reverse("event-detail", args=[parent.seq])}"' in body
    assert f'href="{reverse("event-detail", args=[root.seq])}"' in body
    assert "<dt>depth</dt><dd>2</dd>" in body
    assert f'href="{reverse("causal-root", args=[root.seq])}"' in body
    # The event-route partial: the RouteRecord with its refusals in route order.
    route = re.search(r'<section id="event-route">(.*?)</section>', body, re.S).group(1)
    assert "<strong>unmatched</strong>" in route and "no_match" in route
    assert f'href="{reverse("work-detail", args=[work.pk])}"' in route
    assert route.index("type github.issue does not match") < route.index("data.thread is missing")
    assert "<dt>attempts</dt><dd>2</dd>" in route


def test_d4_event_page_without_a_record_says_why_and_htmx_gets_the_route_partial(signed_in):
    earlier = EventFactory()
    event = EventFactory(unrouted_reason="conflicting identity: key owned by Work 3", waiting_on=earlier)
    page = text(signed_in.get(reverse("event-detail", args=[event.seq])))
    assert f'<dt>waits behind</dt><dd><a href="{reverse("event-detail", args=[earlier.seq])}">' in page
    response = signed_in.get(reverse("event-detail", args=[event.seq]), **htmx("event-route"))
    body = text(response)
    assert body.strip().startswith('<section id="event-route">')
    assert "<html" not in body
    assert "conflicting identity: key owned by Work 3" in body


def test_the_event_page_says_binary_data_is_shown_as_base64(signed_in):
    binary = EventFactory(data="AP8=", binary_data=True, datacontenttype="image/png")
    page = text(signed_in.get(reverse("event-detail", args=[binary.seq])))
    assert 'id="event-binary-data"' in page and "AP8=" in page
    assert "&quot;data_base64&quot;: &quot;AP8=&quot;" in page  # the raw envelope, to offer again
    plain = text(signed_in.get(reverse("event-detail", args=[EventFactory().seq])))
    assert 'id="event-binary-data"' not in plain


def test_d4_missing_event_and_work_are_404(signed_in):
    assert signed_in.get(reverse("event-detail", args=[999999])).status_code == 404
    assert signed_in.get(reverse("work-detail", args=[999999])).status_code == 404


def test_d4_event_list_query_count_is_independent_of_history(signed_in, django_assert_max_num_queries):
    live_scopes("acme", "acme/web")
    for event in EventFactory.create_batch(5, scope="acme"):
        RouteRecordFactory(event=event, work=WorkFactory())
    # 11: the session and its user (2), the permission check (2), the page (2: its seqs, then
    # its rows), the failures of its unrouted Events (1), the total (1, capped), and what the
    # filters offer to pick from: the live scopes, the Events' scopes and types (3),
    # the heartbeat banner (1) and the live updates' outbox position the page renders at (1).
    with django_assert_max_num_queries(13):
        small = count_queries(signed_in, reverse("event-list"))
    for event in EventFactory.create_batch(55, scope="acme"):
        RouteRecordFactory(event=event, work=WorkFactory())
    with django_assert_max_num_queries(13):
        large = count_queries(signed_in, reverse("event-list"))
    assert small == large


# --- totals, paging both ways and the CLI's own filters -------------------------------------------


def failing_event(clock, name: str):
    """An Event whose route keeps failing: unrouted, with a failure counted."""
    sample_handlers.BROKEN.add(name)
    event = accept(clock, "x.thing", {}, id=name)
    r = router(clock)
    try:
        drain(r)
    finally:
        r.close()
    return event


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_skip_on_the_event_page_updates_heading_state_route_and_chain_at_once(operator_console, clock):
    apply(clock)
    event = failing_event(clock, "whole")
    page = text(operator_console.get(reverse("event-detail", args=[event.seq])))
    assert "badge-unrouted" in part(page, "h1", "event-heading")

    response = operator_console.post(
        reverse("event-skip", args=[event.seq]), HTTP_HX_TARGET="event-route", **HTMX
    )
    assert response.status_code == 200
    body = text(response)
    # The target first, then every other part of the page out of band, all saying skipped.
    assert body.strip().startswith('<section id="event-route">')
    assert "<strong>skipped</strong>" in part(body, "section", "event-route")
    heading = part(body, "h1", "event-heading")
    assert 'hx-swap-oob="true"' in heading and "badge-skipped" in heading and "unrouted" not in heading
    state_box = part(body, "section", "event-state")
    assert (
        'hx-swap-oob="true"' in state_box
        and "badge-skipped" in state_box
        and "unrouted_reason</dt><dd>—" in state_box
    )
    chain = part(body, "section", "event-chain")
    assert 'hx-swap-oob="true"' in chain
    assert "badge-skipped" in re.search(rf'<tr id="chain-{event.seq}".*?</tr>', chain, re.S).group(0)
    # The control's message sits outside the parts live updates replace.
    result = part(body, "div", "event-control-result")
    assert f"Event #{event.seq} skipped by operator" in result and 'hx-swap-oob="true"' in result


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_a_rerouted_event_links_to_its_copy_instead_of_offering_reroute(operator_console, clock):
    apply(clock)
    event = failing_event(clock, "copied")
    controls.event_skip(seq=event.seq, user="alice", clock=clock)
    before = text(operator_console.get(reverse("event-detail", args=[event.seq])))
    assert f'hx-post="{reverse("event-reroute", args=[event.seq])}"' in before

    response = operator_console.post(
        reverse("event-reroute", args=[event.seq]), HTTP_HX_TARGET="event-route", **HTMX
    )
    assert response.status_code == 200
    copy_seq = controls.reroute_copies([event])[event.seq]
    for body in (text(response), text(operator_console.get(reverse("event-detail", args=[event.seq])))):
        route = part(body, "section", "event-route")
        assert f'hx-post="{reverse("event-reroute", args=[event.seq])}"' not in route
        assert f'rerouted as <a href="{reverse("event-detail", args=[copy_seq])}">#{copy_seq}</a>' in route
        assert f"#{copy_seq}" in part(body, "h1", "event-heading")
        assert f"#{copy_seq}</a> (its copy" in part(body, "section", "event-state")


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_unmatched_and_dropped_events_are_not_shown_as_routed(operator_console):
    # The policies named without importing the decision are the decision's own.
    assert set(UNDELIVERED_OUTCOMES) == {Effect.UNMATCHED, Effect.DROP}
    unmatched = EventFactory(route_state=RouteState.ROUTED)
    RouteRecordFactory(event=unmatched, policy="unmatched")
    dropped = EventFactory(route_state=RouteState.ROUTED)
    RouteRecordFactory(event=dropped, policy="drop")
    delivered = EventFactory(route_state=RouteState.ROUTED)
    RouteRecordFactory(event=delivered, policy="queue")
    body = text(operator_console.get(reverse("event-list")))
    assert 'badge-unmatched">unmatched' in part(body, "tr", f"event-{unmatched.seq}")
    assert 'badge-dropped">dropped' in part(body, "tr", f"event-{dropped.seq}")
    assert 'badge-routed">routed' in part(body, "tr", f"event-{delivered.seq}")
    page = text(operator_console.get(reverse("event-detail", args=[unmatched.seq])))
    assert 'badge-unmatched">unmatched' in part(page, "h1", "event-heading")


def cli_seqs(**options) -> list[int]:
    out = io.StringIO()
    arguments = [f"--{k}" if v == "" else f"--{k}={v}" for k, v in options.items()]
    call_command("events", "list", "--json", *arguments, stdout=out)
    return [item["conduit"]["seq"] for item in json.loads(out.getvalue())["events"]]


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_event_list_filters_as_events_list_does(operator_console):
    pr = EventFactory(scope="acme/web", type="github.pull_request.opened", accepted_at=CAP_T0)
    push = EventFactory(scope="acme", type="github.push", accepted_at=CAP_T0 + timedelta(hours=1))
    deep = EventFactory(scope="acme/web/x", type="slack.message", accepted_at=CAP_T0 + timedelta(hours=2))
    # Types and scopes compare case-sensitively, as routes match them.
    EventFactory(scope="ACME/web", type="GitHub.push", accepted_at=CAP_T0)
    other = EventFactory(
        scope="acmeco", type="github.push", subject="PR 7", accepted_at=CAP_T0 + timedelta(hours=3)
    )
    unmatched = EventFactory(
        scope="ops", type="ops.alert", envelope_id="alert-1", route_state=RouteState.ROUTED
    )
    RouteRecordFactory(event=unmatched, policy="unmatched")

    def listed(params: dict[str, str], cli: dict[str, str]) -> list[int]:
        response = operator_console.get(reverse("event-list"), params)
        assert response.status_code == 200, text(response)
        shown = row_seqs(text(response))
        # One code path: the page lists what the CLI lists for the same filters.
        assert shown == cli_seqs(**cli)
        return shown

    assert listed({"type": "github.*"}, {"type": "github.*"}) == [other.seq, push.seq, pr.seq]
    assert listed({"scope": "acme", "subtree": "1"}, {"scope": "acme", "subtree": ""}) == [
        deep.seq,
        push.seq,
        pr.seq,
    ]
    assert listed({"scope": "acme"}, {"scope": "acme"}) == [push.seq]
    since, until = (CAP_T0 + timedelta(hours=1)).isoformat(), (CAP_T0 + timedelta(hours=3)).isoformat()
    assert listed({"since": since, "until": until}, {"since": since, "until": until}) == [deep.seq, push.seq]
    assert listed({"since": "2026-01-05T13:00"}, {"since": "2026-01-05T13:00"})[-1] == push.seq
    assert listed({"q": "alert-1"}, {"query": "alert-1"}) == [unmatched.seq]
    assert listed({"q": "PR 7"}, {"query": "PR 7"}) == [other.seq]
    assert listed({"q": f"#{deep.seq}"}, {"query": f"#{deep.seq}"}) == [deep.seq]
    assert listed({"policy": "unmatched"}, {"policy": "unmatched"}) == [unmatched.seq]
    assert listed(
        {"scope": "acme", "subtree": "1", "type": "github.*"},
        {"scope": "acme", "subtree": "", "type": "github.*"},
    ) == [
        push.seq,
        pr.seq,
    ]


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_bad_filters_name_their_field_and_list_nothing(operator_console):
    response = operator_console.get(reverse("event-list"), {"since": "last week", "route_state": "lost"})
    assert response.status_code == 400
    body = text(response)
    assert (
        "since: expected an ISO 8601 time like 2026-01-05T12:00:00Z" in body
        and "&#x27;last week&#x27;" in body
    )
    assert "route_state: Select a valid choice" in body
    refused = operator_console.get(reverse("event-list"), {"subtree": "1"})
    assert refused.status_code == 400 and "subtree: needs a scope" in text(refused)
    backwards = operator_console.get(reverse("event-list"), {"since": "2026-01-06", "until": "2026-01-05"})
    assert backwards.status_code == 400 and "until: must be later than since" in text(backwards)


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_event_list_offers_known_types_scopes_and_policies(operator_console):
    live_scopes("acme", "acme/web")
    EventFactory(scope="ops", type="ops.alert")
    EventFactory.create_batch(3, scope="acme", type="github.push")
    body = text(operator_console.get(reverse("event-list")))
    types = part(body, "datalist", "event-types")
    assert re.findall(r'<option value="([^"]+)">', types) == ["github.push", "ops.alert"]
    scopes = part(body, "datalist", "scope-paths")
    assert re.findall(r'<option value="([^"]+)">', scopes) == ["acme", "acme/web", "ops"]
    policies = re.findall(r'<option value="([^"]+)">', part(body, "datalist", "route-policies"))
    assert {"unmatched", "drop", "queue", "start", "skipped", "failed"} <= set(policies)


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_event_list_shows_its_total_and_jumps_to_oldest_and_to_newest_only_past_the_first_page(
    operator_console,
):
    events = EventFactory.create_batch(120, scope="acme")
    seqs = [e.seq for e in events]
    EventFactory(scope="elsewhere")
    newest = text(operator_console.get(reverse("event-list"), {"scope": "acme"}))
    assert "120 Events</span>" in newest
    assert row_seqs(newest) == seqs[::-1][:50]
    oldest_url = reverse("event-list") + "?scope=acme&amp;oldest=1"
    assert f'<a href="{oldest_url}"' in newest
    assert "← Newest" not in newest  # the newest page already
    older = re.search(r'<a href="([^"]+)"[^>]*rel="next">Older', newest).group(1).replace("&amp;", "&")
    assert "← Newest" in text(operator_console.get(older))

    oldest = text(operator_console.get(reverse("event-list"), {"scope": "acme", "oldest": "1"}))
    assert row_seqs(oldest) == seqs[:50]
    assert "120 Events, oldest first" in oldest
    assert f'<a href="{oldest_url}"' not in oldest  # on it already
    newer = re.search(r'<a href="([^"]+)"[^>]*rel="next">Newer', oldest).group(1).replace("&amp;", "&")
    assert newer == f"{reverse('event-list')}?scope=acme&oldest=1&after={seqs[49]}"
    second = text(operator_console.get(newer))
    assert row_seqs(second) == seqs[50:100]
    assert f'ws-connect="/ws/events/?scope=acme&amp;oldest=1&amp;after={seqs[49]}&amp;outbox=' in second
    assert "← Newest" in second
    mixed = operator_console.get(reverse("event-list"), {"before": seqs[10], "oldest": "1"})
    assert mixed.status_code == 400 and "before: pages a newest-first list" in text(mixed)


def count_list_queries(client, url, params=None) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params or {})
    assert response.status_code == 200, text(response)
    return len(queries)


@pytest.mark.usefixtures("routing_handlers")
@pytest.mark.django_db
def test_filtered_list_query_counts_are_pinned_and_do_not_grow(
    operator_console, django_assert_max_num_queries
):
    events = {
        "q": "subject 1",
        "scope": "acme",
        "subtree": "1",
        "type": "github.*",
        "policy": "queue",
        "since": "2026-01-01",
    }
    work = {"scope": "acme", "status": "ready", "binding": "agent", "key": "k"}

    def grow(n):
        for event in EventFactory.create_batch(n, scope="acme/web", type="github.push", subject="subject 1"):
            RouteRecordFactory(event=event, policy="queue")
        for item in WorkFactory.create_batch(n, scope="acme", binding="agent"):
            CorrelationKeyFactory(work=item, scope="acme")

    grow(3)
    # The session, its user, the permission check (4); the Events list: its seqs and rows, the
    # failures, the total and the three lists to pick from (7); the Work list: its page and
    # total (2) and the pauses in force (1: `ready` leaves out the Work they hold, the rows they
    # hold read "paused"); the heartbeat banner (1 a page: the pauses in force); the outbox
    # position each list renders at (1 a page).
    with django_assert_max_num_queries(13):
        small_events = count_list_queries(operator_console, reverse("event-list"), events)
    with django_assert_max_num_queries(9):
        small_work = count_list_queries(operator_console, reverse("work-list"), work)
    grow(60)
    with django_assert_max_num_queries(13):
        assert count_list_queries(operator_console, reverse("event-list"), events) == small_events
    with django_assert_max_num_queries(9):
        assert count_list_queries(operator_console, reverse("work-list"), work) == small_work


# --- the route on the Event page (R29) ------------------------------------------------------------


def section(body: str, name: str) -> str:
    match = re.search(rf'<section id="{name}"[^>]*>(.*?)</section>', body, re.S)
    assert match, f"no section {name}"
    return match.group(1)


@pytest.mark.usefixtures("routing_handlers")
def test_r29_event_page_shows_the_route_with_refusals_work_and_generation(console, history):
    body = console.get(reverse("event-detail", args=[history.unmatched.seq])).content.decode()
    route = section(body, "event-route")
    assert "<strong>unmatched</strong>" in route and "no_match" in route
    positions = [route.index(f"<strong>{r['route']}</strong>: {r['reason']}") for r in REFUSALS]
    assert positions == sorted(positions)
    body = console.get(reverse("event-detail", args=[history.started.seq])).content.decode()
    route = section(body, "event-route")
    assert f'<a href="{reverse("work-detail", args=[history.work_id])}">Work {history.work_id}</a>' in route
    assert "<dt>route</dt><dd>acme:pr</dd>" in route
    assert "<dt>binding</dt><dd>triage</dd>" in route
    assert "<dt>generation</dt><dd>1</dd>" in route


@pytest.mark.usefixtures("routing_handlers")
def test_r16_r29_event_page_shows_the_error_and_attempts_of_a_failed_route(console, history):
    body = console.get(reverse("event-detail", args=[history.failed.seq])).content.decode()
    route = section(body, "event-route")
    assert "route scripted: payload has no author" in route
    assert "<dt>attempts</dt><dd>1</dd>" in route
    assert "handler_invalid" in route


@pytest.mark.usefixtures("routing_handlers")
def test_r13_r29_event_page_shows_why_an_event_is_unrouted(console, history):
    body = console.get(reverse("event-detail", args=[history.failing.seq])).content.decode()
    route = section(body, "event-route")
    assert "<dt>failures</dt><dd><strong>1</strong> (handler_failed on route scripted)" in route
    assert "route scripted: upstream is restarting" in route
    assert (
        '<dt>next retry</dt><dd><time datetime="2026-01-05T12:00:02Z">2026-01-05 12:00:02 UTC</time></dd>'
        in route
    )
    body = console.get(reverse("event-detail", args=[history.behind.seq])).content.decode()
    route = section(body, "event-route")
    link = reverse("event-detail", args=[history.failing.seq])
    assert f'<dt>waiting on</dt><dd><a href="{link}">#{history.failing.seq}</a>' in route
    assert f"<dt>next retry</dt><dd>when #{history.failing.seq} settles</dd>" in route
    assert "<dt>failures</dt><dd>none</dd>" in route


@pytest.mark.usefixtures("routing_handlers")
def test_r29_event_page_shows_the_causal_chain_with_each_policy(console, history):
    body = console.get(reverse("event-detail", args=[history.child.seq])).content.decode()
    chain = section(body, "event-chain")
    rows = re.findall(r'<tr id="chain-(\d+)"', chain)
    assert [int(s) for s in rows] == [history.started.seq, history.child.seq]
    assert "<strong>start</strong>" in chain and "<strong>queue</strong>" in chain
    assert f'href="{reverse("causal-root", args=[history.started.seq])}"' in chain
    assert f'href="{reverse("event-detail", args=[history.started.seq])}"' in chain
    # htmx asks for one partial: the route alone does not read the chain.
    partial = console.get(
        reverse("event-detail", args=[history.child.seq]),
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="event-chain",
    ).content.decode()
    assert partial.strip().startswith('<section id="event-chain">')
