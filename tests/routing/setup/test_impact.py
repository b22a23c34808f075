"""The impact preview re-traces the latest Events against live and a candidate,
keeps only what changes, grouped, each with both traces; it writes nothing (R37)."""

from __future__ import annotations

import io
import json

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command

from routing.acceptance.services import event_accept
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from routing.models import RouteRecord
from routing.setup.impact import (
    DEFAULT_EVENTS,
    MAX_EVENTS,
    ImpactInvalid,
    Outcome,
    change_group,
    impact_preview,
    offered,
    recent_events,
)
from routing.setup.trace import TraceRefused, trace, trace_candidate
from tests.routing.factories import CHANGED, DEFAULT_TEST_CONFIG, apply_config

pytestmark = pytest.mark.django_db

OFFERED = [
    {
        "source": "gh",
        "type": "github.pull_request.opened",
        "scope": "acme",
        "data": {"repository": "a/b", "number": 1},
    },
    {"source": "chat", "type": "chat.message", "scope": "acme", "data": {"thread": "t1"}},
    {"source": "chat", "type": "chat.message", "scope": "acme", "data": {"thread": "t1"}},
    {"source": "mon", "type": "x.ping", "scope": "acme"},
    {"source": "mon", "type": "issue.opened", "scope": "acme"},
    {"source": "ci", "type": "deploy.started", "scope": "acme/web", "data": {"service": "api"}},
]


@pytest.fixture
def routed(clock):
    """The default configuration live and six Events accepted and routed (three Work)."""
    apply_config()
    events = [
        event_accept(payload={"specversion": "1.0", "id": f"i{n}", **payload}, clock=clock).event
        for n, payload in enumerate(OFFERED)
    ]
    router = build_router(clock=clock, options=RouterOptions(workers=1))
    try:
        router.route_pending()
    finally:
        router.close()
    return events


def row_counts():
    return {
        model._meta.label: model.objects.count()
        for model in apps.get_models()
        if model._meta.app_label in ("causal", "worklife", "routing")
    }


def seqs(report):
    return {group: [change.seq for change in changes] for group, changes in report.groups}


def test_an_impact_preview_keeps_only_changes_grouped_with_both_traces(clock, routed):
    candidate = apply_config(CHANGED, candidate=True)

    report = impact_preview(candidate=candidate, clock=clock)

    assert (report.examined, report.live, report.candidate) == (6, "1", candidate.pk)
    assert seqs(report) == {"other route or binding": [routed[5].seq], "drop → unmatched": [routed[3].seq]}
    deploy = report.groups[0][1][0]
    assert (deploy.live.result.binding, deploy.candidate.result.binding) == ("agent", "shell")
    assert (
        deploy.live.result.work_id
        == deploy.candidate.result.work_id
        == RouteRecord.objects.get(event=routed[5]).work_id
    )
    ping = report.groups[1][1][0]
    assert (ping.live.result.route, ping.candidate.result.route) == ("noise", "")
    assert ping.candidate.result.generation == "candidate" and ping.live.result.generation == "1"
    as_json = report.as_dict()
    assert (
        as_json["changed"] == 2 and as_json["groups"][1]["changes"][0]["candidate"]["effect"] == "unmatched"
    )


def test_a_removed_scope_and_a_removed_route_group_as_refused_and_unmatched(clock, routed):
    without_web = DEFAULT_TEST_CONFIG[: DEFAULT_TEST_CONFIG.index("  - path: acme/web")]
    without_prs = DEFAULT_TEST_CONFIG.replace("      - slot: prs\n", "      - slot: prs-old\n", 1).replace(
        'params: {type: "github.pull_request.*", keys', 'params: {type: "github.pull_request.closed", keys', 1
    )

    gone = impact_preview(candidate=apply_config(without_web, candidate=True), clock=clock)
    other = impact_preview(candidate=apply_config(without_prs, candidate=True), clock=clock)

    assert seqs(gone) == {"queue → refused": [routed[5].seq]}
    refused = gone.groups[0][1][0].candidate
    assert refused.refused.field == "scope" and refused.as_dict()["effect"] == "refused"
    assert seqs(other) == {"queue → unmatched": [routed[0].seq]}


def test_an_impact_preview_writes_nothing(clock, routed):
    candidate = apply_config(CHANGED, candidate=True)
    before = row_counts()

    report = impact_preview(candidate=candidate, clock=clock, events=MAX_EVENTS)

    assert report.changed == 2
    assert row_counts() == before


APPENDED_ROUTE = DEFAULT_TEST_CONFIG.replace(
    "  - path: acme/web",
    """      - slot: alerts
        handler: match
        params: {type: "alert.*", keys: ["alert:{data.id}"]}
        binding: agent
        policy: queue
  - path: acme/web""",
)
ONLY_WEB = DEFAULT_TEST_CONFIG.replace(
    'params: {type: "deploy.*", keys: ["deploy:{data.service}"]}\n        binding: agent',
    'params: {type: "deploy.*", keys: ["deploy:{data.service}"]}\n        binding: shell',
)


@pytest.mark.parametrize(
    ("document", "traced"),
    [
        (CHANGED, 6),  # acme's bindings change: every Event of acme and acme/web is traced
        (ONLY_WEB, 1),  # only acme/web's Event can change
        (APPENDED_ROUTE, 0),  # a route after every match, that matches none of them
        (DEFAULT_TEST_CONFIG.replace("policy: drop", "policy: queue\n        binding: inbox"), 1),
        (DEFAULT_TEST_CONFIG[: DEFAULT_TEST_CONFIG.index("  - path: acme/web")], 1),
    ],
    ids=["changed", "only-web", "appended-route", "noise-queues", "web-removed"],
)
def test_the_shortcuts_give_the_same_report_as_tracing_everything(clock, routed, document, traced):
    candidate = apply_config(document, candidate=True)

    quick = impact_preview(candidate=candidate, clock=clock)
    full = impact_preview(candidate=candidate, clock=clock, exhaustive=True)

    assert [(g, [c.as_dict() for c in cs]) for g, cs in quick.groups] == [
        (g, [c.as_dict() for c in cs]) for g, cs in full.groups
    ]
    assert (quick.traced, full.traced) == (traced, 6)


def test_an_impact_preview_examines_the_latest_n_events(clock, routed):
    candidate = apply_config(CHANGED, candidate=True)
    report = impact_preview(candidate=candidate, clock=clock, events=2)
    assert (report.examined, report.first_seq, report.last_seq) == (2, routed[4].seq, routed[5].seq)
    assert seqs(report) == {"other route or binding": [routed[5].seq]}


@pytest.mark.parametrize("events", [0, MAX_EVENTS + 1, -3, "10", True, 2.5])
def test_an_impact_preview_refuses_a_bad_event_count(clock, routed, events):
    candidate = apply_config(CHANGED, candidate=True)
    with pytest.raises(ImpactInvalid) as refused:
        impact_preview(candidate=candidate, clock=clock, events=events)
    assert refused.value.field == "events"


def test_an_impact_preview_needs_a_live_configuration_and_a_candidate(clock):
    candidate = apply_config(candidate=True)
    with pytest.raises(ImpactInvalid, match="no configuration has been applied yet"):
        impact_preview(candidate=candidate, clock=clock)
    live = apply_config()
    with pytest.raises(ImpactInvalid, match="is not a candidate"):
        impact_preview(candidate=live, clock=clock)


# --- CLI ------------------------------------------------------------------------------------------


def test_cli_config_preview_prints_the_groups_with_both_sides(clock, routed):
    candidate = apply_config(CHANGED, candidate=True)

    out = io.StringIO()
    call_command("config", "preview", str(candidate.pk), stdout=out)

    text = out.getvalue()
    assert text.startswith(
        f"2 of the 6 latest Events (#{routed[0].seq} to #{routed[5].seq}) would route otherwise"
    )
    assert "nothing was written" in text
    assert "drop → unmatched: 1" in text
    assert f"  #{routed[3].seq} x.ping in acme: drop by noise  |  unmatched" in text
    assert f"  #{routed[5].seq} deploy.started in acme/web: queue by deploys on agent (Work" in text

    out = io.StringIO()
    call_command("config", "preview", str(candidate.pk), "--events", "1", "--json", stdout=out)
    assert json.loads(out.getvalue())["examined"] == 1


@pytest.mark.parametrize(
    ("args", "message"), [(["--events", "0"], "from 1 to 10000"), ([], "no candidate 99")]
)
def test_cli_config_preview_refuses_bad_input(clock, routed, args, message):
    candidate = apply_config(CHANGED, candidate=True)
    target = "99" if not args else str(candidate.pk)
    with pytest.raises(CommandError, match=message):
        call_command("config", "preview", target, *args, stdout=io.StringIO())


@pytest.mark.parametrize("document", [CHANGED, ONLY_WEB], ids=["changed", "only-web"])
def test_traces_sharing_one_snapshot_equal_traces_each_on_its_own(clock, routed, document):
    """The preview's traces share one read snapshot and what they read alike (the earlier
    input, the Works, key owners, subscriptions); each must still equal a trace taken alone."""
    # Unrouted input behind the routed Events: a trace's window now holds earlier Events.
    for n, payload in enumerate(OFFERED):
        event_accept(payload={"specversion": "1.0", "id": f"later{n}", **payload}, clock=clock)
    candidate = apply_config(document, candidate=True)

    report = impact_preview(candidate=candidate, clock=clock, exhaustive=True)

    expected: dict[str, list] = {}
    for event in recent_events(DEFAULT_EVENTS):
        payload, operator = offered(event)
        live = Outcome(result=trace(payload=payload, clock=clock, operator=operator))
        try:
            changed = Outcome(
                result=trace_candidate(candidate=candidate, payload=payload, clock=clock, operator=operator)
            )
        except TraceRefused as exc:
            changed = Outcome(refused=exc)
        group = change_group(live, changed)
        if group is not None:
            expected.setdefault(group, []).append((event.seq, live.as_dict(), changed.as_dict()))
    assert report.examined == 12 and expected
    assert {
        group: [(c.seq, c.live.as_dict(), c.candidate.as_dict()) for c in changes]
        for group, changes in report.groups
    } == expected


def test_shared_reads_hold_with_backlog_failures_and_undecided_input(clock, test_handlers):
    """The same with earlier input in the windows: a backing-off Event that later input of its
    key waits behind, undecided input that routes first, and Works several Events share."""
    from routing.config.services import config_candidate
    from tests.routing import sample_handlers
    from tests.routing.routerkit import DOCUMENT, accept, apply, router

    apply(clock)
    r = router(clock)
    for n, key in enumerate(["k:1", "k:2", "k:1", "k:2"]):
        r.route(accept(clock, "x.job", {"keys": [key]}, id=f"a{n}", correlation=[key]).seq)
    sample_handlers.BROKEN.add("h1")
    r.route(accept(clock, "x.job", {"keys": ["k:1"]}, id="h1", correlation=["k:1"]).seq)
    accept(clock, "x.job", {"keys": ["k:3"]}, id="u1", correlation=["k:3"])
    accept(clock, "x.job", {"keys": ["k:2", "k:4"]}, id="u2", correlation=["k:2", "k:4"])
    r.close()
    candidate = config_candidate(
        document=DOCUMENT.replace(
            "binding: inbox\n        policy: queue", "binding: triage\n        policy: queue"
        ),
        clock=clock,
    )

    report = impact_preview(candidate=candidate, clock=clock, exhaustive=True)

    expected: dict[str, list] = {}
    effects = set()
    for event in recent_events(DEFAULT_EVENTS):
        payload, operator = offered(event)
        live = Outcome(result=trace(payload=payload, clock=clock, operator=operator))
        changed = Outcome(
            result=trace_candidate(candidate=candidate, payload=payload, clock=clock, operator=operator)
        )
        effects |= {live.effect, changed.effect}
        group = change_group(live, changed)
        if group is not None:
            expected.setdefault(group, []).append((event.seq, live.as_dict(), changed.as_dict()))
    assert {"waiting", "queue"} <= effects and expected, effects
    assert {
        group: [(c.seq, c.live.as_dict(), c.candidate.as_dict()) for c in changes]
        for group, changes in report.groups
    } == expected
