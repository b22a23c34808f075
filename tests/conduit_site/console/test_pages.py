"""The console's pages: sign-in, the Events and Work lists and pages, the Configuration
page and the home page (D4, D6, D8)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from causal.models import RouteState
from tests.causal.factories import EventFactory
from tests.routing.factories import GenerationFactory, RouteRecordFactory, UserFactory, live_scopes
from tests.worklife.factories import (
    AttemptFactory,
    CorrelationKeyFactory,
    IntentFactory,
    TimerFactory,
    WaitFactory,
    WorkFactory,
    WorkInputFactory,
)

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-console-password-1"
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def operator():
    user = UserFactory(username="operator")
    user.set_password(PASSWORD)
    user.save()
    return user


@pytest.fixture
def console(client, operator):
    client.force_login(operator)
    return client


def htmx(target: str) -> dict[str, str]:
    return {**HTMX, "HTTP_HX_TARGET": target}


def text(response) -> str:
    return response.content.decode()


# --- sign-in ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,args",
    [
        ("console-home", []),
        ("event-list", []),
        ("event-detail", [1]),
        ("work-list", []),
        ("work-detail", [1]),
        ("config-list", []),
    ],
)
def test_d4_every_console_page_requires_sign_in(client, name, args):
    url = reverse(name, args=args)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


def test_d4_sign_in_through_the_form_then_sign_out(client, operator):
    page = client.get(reverse("login"))
    assert page.status_code == 200
    assert 'name="username"' in text(page) and 'name="password"' in text(page)

    refused = client.post(reverse("login"), {"username": "operator", "password": "wrong"})
    assert refused.status_code == 200
    assert "errorlist" in text(refused)
    assert client.get(reverse("console-home")).status_code == 302

    signed_in = client.post(reverse("login"), {"username": "operator", "password": PASSWORD})
    assert signed_in.status_code == 302
    assert signed_in["Location"] == reverse("console-home")
    assert client.get(reverse("console-home")).status_code == 200

    signed_out = client.post(reverse("logout"))
    assert signed_out.status_code == 302
    assert signed_out["Location"] == reverse("login")
    assert client.get(reverse("console-home")).status_code == 302


def test_d4_base_layout_loads_vendored_htmx_and_puts_csrf_in_hx_headers(console):
    body = text(console.get(reverse("console-home")))
    assert '<script src="/static/htmx/htmx.min.js" defer></script>' in body
    assert '<script src="/static/htmx/ext/ws.min.js" defer></script>' in body
    assert re.search(r"<body hx-headers='\{\"X-CSRFToken\": \"[A-Za-z0-9]+\"\}'>", body)
    assert "http://" not in body and "https://" not in body


# --- home ---------------------------------------------------------------------------------------


def test_d4_home_counts_unrouted_events_work_by_status_and_names_the_live_generation(console):
    EventFactory.create_batch(3)
    EventFactory(route_state=RouteState.ROUTED)
    WorkFactory.create_batch(2, status="running")
    WorkFactory(status="completed")
    GenerationFactory(number=1)
    GenerationFactory(number=2)
    GenerationFactory(kind="candidate", number=None)

    body = text(console.get(reverse("console-home")))

    assert re.search(r"Unrouted Events</h2>\s*<div class=\"figure\">3</div>", body)
    assert re.search(r"badge-running\">running</span></a><span class=\"num\">2</span>", body)
    assert re.search(r"badge-completed\">completed</span></a><span class=\"num\">1</span>", body)
    assert re.search(r"badge-ready\">ready</span></a><span class=\"num\">0</span>", body)
    assert "generation 2, applied" in body
    for name in ("event-list", "work-list", "config-list"):
        assert f'href="{reverse(name)}' in body


# --- Events -------------------------------------------------------------------------------------


def test_d4_event_list_filters_by_scope_type_and_route_state(console):
    EventFactory(scope="acme", type="github.push", envelope_id="keep-me")
    EventFactory(scope="acme", type="github.issue", envelope_id="other-type")
    EventFactory(scope="acme/web", type="github.push", envelope_id="other-scope")
    routed = EventFactory(scope="acme", type="github.push", route_state=RouteState.ROUTED)
    RouteRecordFactory(event=routed, policy="drop")

    def seqs(**params):
        response = console.get(reverse("event-list"), params)
        assert response.status_code == 200
        return [int(s) for s in re.findall(r'<tr id="event-(\d+)">', text(response))]

    everything = seqs()
    assert len(everything) == 4 and everything == sorted(everything, reverse=True)
    only = seqs(scope="acme", type="github.push", route_state="unrouted")
    assert len(only) == 1
    assert seqs(scope="acme", type="github.push") == [routed.seq, only[0]]
    assert seqs(route_state="routed") == [routed.seq]
    assert seqs(scope="nowhere") == []


def test_the_event_list_s_empty_time_filters_read_as_any_time(console):
    """The empty Since and Until fields showed a date of January 2026 as their placeholder,
    which read as a filter already set; like the other fields they say "any" first."""
    body = text(console.get(reverse("event-list")))
    placeholders = dict(re.findall(r'name="(since|until)"[^>]*placeholder="([^"]*)"', body))
    assert all(value.startswith("any, or ") for value in placeholders.values()), placeholders
    assert set(placeholders) == {"since", "until"}


def test_d4_event_list_bad_filter_names_the_field(console):
    response = console.get(reverse("event-list"), {"route_state": "lost", "before": "x"})
    assert response.status_code == 400
    body = text(response)
    assert "route_state: Select a valid choice" in body
    assert "before: Enter a whole number" in body


def test_d4_event_list_pages_by_seq_fifty_at_a_time(console):
    events = EventFactory.create_batch(60, scope="acme")
    first = console.get(reverse("event-list"), {"scope": "acme"})
    rows = [int(s) for s in re.findall(r'<tr id="event-(\d+)">', text(first))]
    assert rows == [e.seq for e in reversed(events)][:50]
    next_url = re.search(r'<a href="([^"]+)" hx-get="[^"]+"[^>]*rel="next"', text(first)).group(1)
    assert next_url == f"{reverse('event-list')}?scope=acme&amp;before={rows[-1]}"

    second = console.get(reverse("event-list"), {"scope": "acme", "before": rows[-1]})
    rest = [int(s) for s in re.findall(r'<tr id="event-(\d+)">', text(second))]
    assert rest == [e.seq for e in reversed(events)][50:]
    assert 'rel="next"' not in text(second)
    # A later page stays live on its own page.
    assert 'ws-connect="/ws/events/?scope=acme"' in text(first)
    assert f'ws-connect="/ws/events/?scope=acme&amp;before={rows[-1]}"' in text(second)


def test_d4_event_list_htmx_request_gets_only_the_partial(console):
    EventFactory(type="only.partial")
    response = console.get(reverse("event-list"), {"type": "only.partial"}, **htmx("event-list"))
    body = text(response)
    assert response.status_code == 200
    assert "<html" not in body and "<form" not in body
    assert body.strip().startswith('<section id="event-list"')
    assert 'ws-connect="/ws/events/?type=only.partial"' in body
    assert "only.partial" in body
    assert "HX-Request" in response["Vary"]
    # The same URL without htmx is the whole page.
    assert "<html" in text(console.get(reverse("event-list"), {"type": "only.partial"}))


def test_d4_event_page_shows_envelope_state_ancestry_and_route(console):
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
    body = text(console.get(reverse("event-detail", args=[event.seq])))
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


def test_d4_event_page_without_a_record_says_why_and_htmx_gets_the_route_partial(console):
    earlier = EventFactory()
    event = EventFactory(unrouted_reason="conflicting identity: key owned by Work 3", waiting_on=earlier)
    page = text(console.get(reverse("event-detail", args=[event.seq])))
    assert f'<dt>waits behind</dt><dd><a href="{reverse("event-detail", args=[earlier.seq])}">' in page
    response = console.get(reverse("event-detail", args=[event.seq]), **htmx("event-route"))
    body = text(response)
    assert body.strip().startswith('<section id="event-route">')
    assert "<html" not in body
    assert "conflicting identity: key owned by Work 3" in body


def test_the_event_page_says_binary_data_is_shown_as_base64(console):
    binary = EventFactory(data="AP8=", binary_data=True, datacontenttype="image/png")
    page = text(console.get(reverse("event-detail", args=[binary.seq])))
    assert 'id="event-binary-data"' in page and "AP8=" in page
    assert "&quot;data_base64&quot;: &quot;AP8=&quot;" in page  # the raw envelope, to offer again
    plain = text(console.get(reverse("event-detail", args=[EventFactory().seq])))
    assert 'id="event-binary-data"' not in plain


def test_d4_missing_event_and_work_are_404(console):
    assert console.get(reverse("event-detail", args=[999999])).status_code == 404
    assert console.get(reverse("work-detail", args=[999999])).status_code == 404


# --- Work ---------------------------------------------------------------------------------------


def test_d4_work_list_filters_by_scope_and_status_and_pages(console):
    ready = WorkFactory.create_batch(55, scope="acme", status="ready")
    done = WorkFactory(scope="acme", status="completed")
    WorkFactory(scope="other", status="ready")

    def ids(**params):
        response = console.get(reverse("work-list"), params)
        assert response.status_code == 200
        return [int(s) for s in re.findall(r'<tr id="work-(\d+)">', text(response))], text(response)

    assert ids(status="completed")[0] == [done.pk]
    first, body = ids(scope="acme", status="ready")
    assert first == [w.pk for w in reversed(ready)][:50]
    second, _ = ids(scope="acme", status="ready", before=first[-1])
    assert second == [w.pk for w in reversed(ready)][50:]
    assert console.get(reverse("work-list"), {"status": "sleeping"}).status_code == 400
    partial = console.get(reverse("work-list"), {"status": "completed"}, **htmx("work-list"))
    # The list with its live connection (the filter's), holding the rows live updates swap.
    assert (
        text(partial)
        .strip()
        .startswith(
            '<section id="work-list" aria-live="polite" hx-ext="ws" ws-connect="/ws/work/?status=completed">'
        )
    )
    assert '<div id="work-rows">' in text(partial)


def test_d4_work_page_shows_links_keys_attempts_input_in_acceptance_order_and_history(console):
    parent = WorkFactory()
    predecessor = WorkFactory(status="completed")
    work = WorkFactory(parent=parent, predecessor=predecessor, status="running", scope="acme")
    successor = WorkFactory(predecessor=work)
    CorrelationKeyFactory(work=work, key="pr:acme/web#42")
    AttemptFactory(work=work, number=1, state="failed")
    AttemptFactory(work=work, number=2, state="running")
    first, second, third = (EventFactory(scope="acme", route_state="routed") for _ in range(3))
    # Input rows written out of acceptance order still read in acceptance order.
    for event in (third, first, second):
        WorkInputFactory(work=work, event=event)
    RouteRecordFactory(event=first, work=work, policy="start", reason="matched")
    RouteRecordFactory(event=second, work=work, policy="queue", reason="matched")
    failed = EventFactory(scope="acme", route_state="failed")
    RouteRecordFactory(event=failed, work=work, policy="failed", reason="handler_panic", disposition="failed")
    held = EventFactory(
        scope="acme", correlation=["pr:acme/web#42"], unrouted_reason="retrying: handler_failed"
    )

    response = console.get(reverse("work-detail", args=[work.pk]))
    body = text(response)
    assert response.status_code == 200
    for linked in (parent, predecessor, successor):
        assert f'href="{reverse("work-detail", args=[linked.pk])}"' in body
    assert "pr:acme/web#42" in body
    assert '<tr id="attempt-' in body and "badge-failed" in body
    inputs = re.search(r'<section id="work-input">(.*?)</section>', body, re.S).group(1)
    assert [int(s) for s in re.findall(r'<tr id="input-(\d+)">', inputs)] == [
        first.seq,
        second.seq,
        third.seq,
    ]
    history = re.search(r'<section id="work-history">(.*?)</section>', body, re.S).group(1)
    assert [int(s) for s in re.findall(r'<tr id="history-(\d+)">', history)] == [
        failed.seq,
        second.seq,
        first.seq,
    ]
    assert "handler_panic" in history
    unrouted = re.search(r'<section id="work-unrouted">(.*?)</section>', body, re.S).group(1)
    assert f'<tr id="unrouted-{held.seq}">' in unrouted and "retrying: handler_failed" in unrouted
    # Every Event row carries the (empty, for now) event-controls cell.
    assert body.count('<td class="event-controls">') == 3 + 3 + 1
    assert f'ws-connect="/ws/work/{work.pk}/"' in body


def test_d4_work_history_htmx_request_gets_only_the_partial(console):
    work = WorkFactory()
    RouteRecordFactory(work=work, reason="only-in-history")
    response = console.get(reverse("work-detail", args=[work.pk]), **htmx("work-history"))
    body = text(response)
    assert body.strip().startswith('<section id="work-history">')
    assert "only-in-history" in body
    assert "work-summary" not in body and "<html" not in body
    assert "HX-Request" in response["Vary"]


def test_d4_work_page_pages_its_input_and_history(console):
    work = WorkFactory()
    inputs = WorkInputFactory.create_batch(55, work=work)
    for item in inputs:
        RouteRecordFactory(event=item.event, work=work)
    body = text(console.get(reverse("work-detail", args=[work.pk])))
    shown = [int(s) for s in re.findall(r'<tr id="input-(\d+)">', body)]
    assert shown == [i.seq for i in inputs][:50]
    assert f"?input_after={shown[-1]}" in body
    later = text(console.get(reverse("work-detail", args=[work.pk]), {"input_after": shown[-1]}))
    assert [int(s) for s in re.findall(r'<tr id="input-(\d+)">', later)] == [i.seq for i in inputs][50:]
    # A paged Work page stays live on its page.
    assert f'ws-connect="/ws/work/{work.pk}/?input_after={shown[-1]}"' in later
    older = text(console.get(reverse("work-detail", args=[work.pk]), {"history_before": inputs[5].seq}))
    assert [int(s) for s in re.findall(r'<tr id="history-(\d+)">', older)] == [i.seq for i in inputs][:5][
        ::-1
    ]
    bad = console.get(reverse("work-detail", args=[work.pk]), {"history_before": "-3"})
    assert bad.status_code == 400 and "history_before" in text(bad)


# --- Configuration ------------------------------------------------------------------------------


def test_d4_config_page_lists_generations_and_shows_the_live_document(console):
    GenerationFactory(number=1, document="version: 1\n# first\nscopes: []\n")
    live = GenerationFactory(number=2, document="version: 1\n# the live one\nscopes: []\n")
    candidate = GenerationFactory(kind="candidate", number=None, document="version: 1\n# a candidate\n")
    body = text(console.get(reverse("config-list")))
    ids = [int(s) for s in re.findall(r'<tr id="generation-(\d+)">', body)]
    assert ids == [candidate.pk, live.pk, live.pk - 1]
    assert "# the live one" in body and "# a candidate" not in body and "# first" not in body
    assert "Live document: generation 2" in body
    shown = text(console.get(reverse("config-list"), {"candidate": candidate.pk}))
    assert "# a candidate" in shown and f"Candidate {candidate.pk} (not applied)" in shown
    assert console.get(reverse("config-list"), {"generation": 999999}).status_code == 404


def test_d4_config_page_without_configuration(console):
    body = text(console.get(reverse("config-list")))
    assert "No configuration stored yet" in body


# --- query counts are independent of history length ----------------------------------------------


def count_queries(client, url, params=None) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params or {})
    assert response.status_code == 200
    return len(queries)


def test_d4_event_list_query_count_is_independent_of_history(console, django_assert_max_num_queries):
    live_scopes("acme", "acme/web")
    for event in EventFactory.create_batch(5, scope="acme"):
        RouteRecordFactory(event=event, work=WorkFactory())
    # 11: the session and its user (2), the permission check (2), the page (2: its seqs, then
    # its rows), the failures of its unrouted Events (1), the total (1, capped), and what the
    # filters offer to pick from: the live scopes, the Events' scopes and types (3),
    # and the heartbeat banner (1).
    with django_assert_max_num_queries(12):
        small = count_queries(console, reverse("event-list"))
    for event in EventFactory.create_batch(55, scope="acme"):
        RouteRecordFactory(event=event, work=WorkFactory())
    with django_assert_max_num_queries(12):
        large = count_queries(console, reverse("event-list"))
    assert small == large


def test_d4_work_page_query_count_is_independent_of_history(console, django_assert_max_num_queries):
    work = WorkFactory(parent=WorkFactory(), predecessor=WorkFactory(status="completed"))
    key = CorrelationKeyFactory(work=work)

    def grow(n):
        for item in WorkInputFactory.create_batch(n, work=work):
            RouteRecordFactory(event=item.event, work=work)
            attempt = AttemptFactory(work=work, state="failed")
            WaitFactory(work=work, attempt=attempt, state="woken", woken_by=item.event)
            TimerFactory(work=work, state="fired", fired_event=item.event)
            IntentFactory(attempt=attempt, event=item.event, state="superseded")
            WorkFactory(parent=work)
        EventFactory.create_batch(n, correlation=[key.key], scope=work.scope)

    grow(5)
    # 9, and 2 for the user's permissions (read once: which skip/reroute controls to show), and
    # 5 for the engine: why the Work is not running (1; 2 with nothing to
    # run), its children (1), its waits, timers and intents (1 each; attempts were read already),
    # and the totals of its input and its history (2, capped); the heartbeat banner (1).
    with django_assert_max_num_queries(19):
        small = count_queries(console, reverse("work-detail", args=[work.pk]))
    grow(55)
    with django_assert_max_num_queries(19):
        large = count_queries(console, reverse("work-detail", args=[work.pk]))
    assert small == large


def test_d4_list_pages_and_home_query_counts_are_independent_of_history(console):
    def counts():
        return [
            count_queries(console, reverse("work-list")),
            count_queries(console, reverse("config-list")),
            count_queries(console, reverse("console-home")),
        ]

    WorkFactory.create_batch(5)
    GenerationFactory.create_batch(5)
    small = counts()
    WorkFactory.create_batch(55)
    GenerationFactory.create_batch(55)
    assert counts() == small


TEMPLATES = Path(settings.BASE_DIR) / "templates"


# A count printed right before a plural noun, without pluralize or counted.
BARE_COUNT = re.compile(
    r"\{\{[^}|]*\}\} (Events|passes|slots|failures|attempts|descendants|records|inputs|refusals|receivers)\b"
)


def test_no_template_prints_a_count_before_a_plural_noun_unchecked():
    bare = [
        f"{path.relative_to(TEMPLATES)}: {match.group(0)}"
        for path in sorted(TEMPLATES.rglob("*.html"))
        for match in BARE_COUNT.finditer(path.read_text(encoding="utf-8"))
    ]
    assert bare == []
