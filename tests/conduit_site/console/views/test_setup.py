"""In the console: the setup session page (edit a candidate from the live
document with its problems at their lines, save it, its diff and effective tree, traces against
it, the impact preview, apply and discard) (D5, D8)."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from routing.acceptance.services import event_accept
from routing.config.selectors import live_generation
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from routing.models import Generation, GenerationKind
from tests.conduit_site.console.views.consolekit import htmx
from tests.routing.factories import CHANGED, DEFAULT_TEST_CONFIG, apply_config, user_with_role

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(client):
    client.force_login(user_with_role("admin", username="ada"))
    return client


@pytest.fixture
def viewer(client):
    client.force_login(user_with_role("viewer", username="vic"))
    return client


def candidates():
    return Generation.objects.filter(kind=GenerationKind.CANDIDATE)


def test_the_editor_starts_from_the_live_document(admin):
    apply_config()
    response = admin.get(reverse("setup"))
    assert response.status_code == 200
    page = response.content.decode()
    assert "live document (generation 1)" in page
    assert "- slot: deploys" in page and 'name="document"' in page


def test_the_document_s_help_is_plain_text_without_markdown_backticks(admin):
    apply_config()
    page = admin.get(reverse("setup")).content.decode()
    help_text = re.search(r'id="id_document-label">Document</label> <span class="muted">([^<]*)<', page)
    assert help_text is not None
    assert help_text.group(1).startswith("The whole configuration document (YAML), as manage.py config apply")
    assert "`" not in help_text.group(1)


def test_an_invalid_document_is_shown_with_each_problem_at_its_line_and_nothing_stored(admin):
    apply_config()
    broken = DEFAULT_TEST_CONFIG.replace("policy: drop", "policy: dropp", 1)
    line = broken.splitlines().index("        policy: dropp") + 1

    response = admin.post(reverse("candidate-create"), {"document": broken}, **htmx("setup-editor"))

    assert response.status_code == 400
    page = response.content.decode()
    assert page.lstrip().startswith(
        '<section id="setup-editor" data-swap-statuses="400" data-code-editor-host>'
    )
    assert f'<li class="doc-line doc-line-bad" id="line-{line}">' in page
    assert f"line {line}: scopes[0].routes[4].policy: unknown policy &#x27;dropp&#x27;" in page
    assert 'aria-invalid="true"' in page and "policy: dropp" in page  # the text is kept for fixing
    assert not candidates().exists()


def problems_json(page: str) -> list[dict]:
    found = re.search(r'<script id="setup-problems" type="application/json">(.*?)</script>', page, re.S)
    assert found, "no problems for the editor"
    return json.loads(found.group(1))


def test_each_problem_links_to_its_line_and_is_given_to_the_editor_as_data(admin):
    apply_config()
    broken = "".join(f"# note {n}\n" for n in range(95)) + DEFAULT_TEST_CONFIG.replace(
        "policy: drop", "policy: strat"
    )
    line = broken.splitlines().index("        policy: strat") + 1
    assert line > 100

    response = admin.post(reverse("candidate-create"), {"document": broken}, **htmx("setup-editor"))

    assert response.status_code == 400
    page = response.content.decode()
    # A link that works without JavaScript (the numbered copy's line), and the editor's line.
    link = f'<a href="#line-{line}" data-problem-line="{line}" data-editor="id_document">line {line}</a>'
    assert link in page and f'id="line-{line}"' in page
    assert 'data-code-editor data-check-url="/config/setup/check/" data-problems="setup-problems"' in page
    assert problems_json(page) == [
        {
            "line": line,
            "column": None,
            "message": "scopes[0].routes[4].policy: unknown policy 'strat' "
            "(expected one of: queue, inject, interrupt, drop)",
        }
    ]


def test_a_yaml_syntax_error_gives_the_editor_its_column(admin):
    response = admin.post(reverse("candidate-create"), {"document": "version: 1\nscopes: [1\nb: 2\n"})
    assert response.status_code == 400
    [problem] = problems_json(response.content.decode())
    assert (problem["line"], problem["column"]) == (3, 2)
    assert problem["message"].startswith("document: not valid YAML")


def test_only_the_editor_page_uses_a_style_nonce(admin):
    policy = admin.get(reverse("setup"))["Content-Security-Policy"]
    style_src = re.search(r"style-src ([^;]*)", policy).group(1).split()
    assert style_src[0] == "'self'" and style_src[1].startswith("'nonce-") and len(style_src) == 2
    assert "'unsafe-inline'" not in policy
    assert "nonce-" not in admin.get(reverse("event-list"))["Content-Security-Policy"]


def test_a_valid_document_is_stored_as_a_candidate_by_its_author(admin):
    apply_config()
    response = admin.post(reverse("candidate-create"), {"document": CHANGED})
    candidate = candidates().get()
    assert response.status_code == 302 and response["Location"] == reverse(
        "candidate-detail", args=[candidate.pk]
    )
    assert candidate.created_by == "ada" and candidate.document == CHANGED

    again = admin.post(reverse("candidate-create"), {"document": CHANGED}, **htmx("setup-editor"))
    assert again.status_code == 200 and again["HX-Redirect"].startswith("/config/candidates/")


def test_a_viewer_reads_but_cannot_save_apply_or_discard(viewer):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    assert viewer.get(reverse("setup")).status_code == 200
    page = viewer.get(reverse("candidate-detail", args=[candidate.pk])).content.decode()
    assert "needs the permission routing.apply_configuration" in page and 'id="candidate-apply"' not in page
    assert viewer.post(reverse("candidate-create"), {"document": CHANGED}).status_code == 403
    assert viewer.post(reverse("candidate-apply", args=[candidate.pk])).status_code == 403
    assert viewer.post(reverse("candidate-discard", args=[candidate.pk])).status_code == 403
    assert live_generation().number == 1 and candidates().count() == 1


def test_the_candidate_page_shows_its_id_diff_per_scope_and_effective_tree(admin):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)

    page = admin.get(reverse("candidate-detail", args=[candidate.pk])).content.decode()

    assert f"<h1>Candidate {candidate.pk} " in page
    assert '<h3 id="diff-acme">acme <span class="change-changed">(changed)</span></h3>' in page
    assert '<td class="change-removed">removed</td>' in page and '<td class="change-added">added</td>' in page
    assert '<td class="change-changed">changed: policy, fallback</td>' in page
    # The tree: acme/web's prs is declared there and overrides acme's.
    tree = page[page.index('id="tree-acmeweb"') :]
    assert "<td>prs</td><td>here</td><td>acme</td>" in tree
    assert "<td>chat</td><td>acme</td><td>—</td>" in tree


def test_trace_against_the_candidate_from_a_sample_a_recent_event_or_by_hand(admin, clock):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    event = event_accept(
        payload={"specversion": "1.0", "id": "r1", "source": "mon", "type": "x.ping", "scope": "acme"},
        clock=clock,
    ).event
    url = reverse("candidate-detail", args=[candidate.pk])

    samples = admin.get(url, {"scope": "acme"}).content.decode()
    assert "?scope=acme&amp;sample=" in samples and ">alerts</a>" in samples  # the candidate's own route
    sample = admin.get(url, {"scope": "acme", "sample": "4"}).content.decode()
    assert "alert." in sample  # alerts is acme's fifth route in the candidate
    recent = admin.get(url, {"event": event.seq}).content.decode()
    assert "&quot;type&quot;: &quot;x.ping&quot;" in recent and "&quot;id&quot;: &quot;r1&quot;" in recent

    traced = admin.post(
        reverse("candidate-trace", args=[candidate.pk]),
        {"event": '{"source": "mon", "type": "x.ping", "scope": "acme"}'},
        **htmx("candidate-trace-result"),
    )
    assert traced.status_code == 200
    body = traced.content.decode()
    assert body.lstrip().startswith('<section id="candidate-trace-result"')
    assert '<span class="badge badge-effect badge-unmatched">unmatched</span>' in body
    assert f"candidate {candidate.pk} <span" in body

    refused = admin.post(
        reverse("candidate-trace", args=[candidate.pk]),
        {"event": '{"source": "mon", "type": "x.ping", "scope": "nowhere"}'},
        **htmx("candidate-trace-result"),
    )
    assert refused.status_code == 400 and "Refused (scope)" in refused.content.decode()
    assert 'data-swap-statuses="400"' in refused.content.decode()


def test_the_impact_preview_page_groups_changes_with_both_traces(admin, clock, monkeypatch):
    from conduit_site.console.views import impact
    from routing.setup.impact_runs import impact_run_execute

    # The run is traced at once here, not in a thread of its own.
    monkeypatch.setattr(
        impact, "launch", lambda run_id, clock: impact_run_execute(run_id=run_id, clock=clock)
    )
    apply_config()
    for n, kind in enumerate(("x.ping", "issue.opened")):
        event_accept(
            payload={"specversion": "1.0", "id": f"p{n}", "source": "mon", "type": kind, "scope": "acme"},
            clock=clock,
        )
    router = build_router(clock=clock, options=RouterOptions(workers=1))
    router.route_pending()
    router.close()
    candidate = apply_config(CHANGED, candidate=True)

    response = admin.post(
        reverse("candidate-impact", args=[candidate.pk]), {"events": "10"}, **htmx("candidate-impact")
    )

    assert response.status_code == 200
    page = response.content.decode()
    assert page.lstrip().startswith('<section id="candidate-impact"')
    assert "<strong>1</strong> of the 2 latest Events" in page
    assert "the candidate would leave 1 unmatched" in page
    assert "<td><strong>drop → unmatched</strong></td>" in page
    assert "<h4>Live</h4>" in page and f"<h4>Candidate {candidate.pk}</h4>" in page

    bad = admin.post(
        reverse("candidate-impact", args=[candidate.pk]), {"events": "20000"}, **htmx("candidate-impact")
    )
    assert bad.status_code == 400 and "events" in bad.content.decode()


def test_apply_from_the_page_makes_the_next_generation_with_the_actor(admin):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)

    response = admin.post(reverse("candidate-apply", args=[candidate.pk]), {"expected_live": "1"})

    generation = live_generation()
    assert response.status_code == 302
    assert response["Location"] == reverse("config-list") + f"?generation={generation.number}#document"
    assert (generation.number, generation.created_by, generation.document) == (2, "ada", CHANGED)
    assert not candidates().exists()


def test_apply_with_a_stale_diff_is_refused_409_in_place(admin):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    apply_config()

    response = admin.post(
        reverse("candidate-apply", args=[candidate.pk]), {"expected_live": "1"}, **htmx("candidate-actions")
    )

    assert response.status_code == 409
    assert "the live configuration is generation 2 now, not 1" in response.content.decode()
    assert live_generation().number == 2 and candidates().count() == 1


def test_discard_from_the_page_removes_the_candidate(admin):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    response = admin.post(reverse("candidate-discard", args=[candidate.pk]), **htmx("candidate-actions"))
    assert response.status_code == 200 and response["HX-Redirect"] == reverse("setup")
    assert not candidates().exists()
    assert admin.get(reverse("candidate-detail", args=[candidate.pk])).status_code == 404


def test_the_candidate_pages_queries_do_not_grow_with_history(admin, clock):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    url = reverse("candidate-detail", args=[candidate.pk])

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin.get(url).status_code == 200
        return len(captured.captured_queries)

    def accept(count: int, start: int) -> None:
        for n in range(start, start + count):
            payload = {
                "specversion": "1.0",
                "id": f"h{n}",
                "source": "mon",
                "type": "x.ping",
                "scope": "acme",
            }
            event_accept(payload=payload, clock=clock)

    accept(2, 0)
    queries()  # the first request reads both configurations; the process keeps them
    few = queries()
    accept(30, 2)
    assert queries() == few


# --- after apply: the applied generation's page ------------------------------------------------


def test_apply_leads_to_the_generation_and_the_candidate_address_follows_it(admin):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    page = reverse("candidate-detail", args=[candidate.pk])
    assert admin.get(page).status_code == 200

    applied = admin.post(
        reverse("candidate-apply", args=[candidate.pk]),
        {"expected_live": "1"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="candidate-actions",
    )

    generation = live_generation()
    url = f"/config/?generation={generation.number}#document"
    assert applied["HX-Redirect"] == url
    shown = admin.get(url)
    assert (
        shown.status_code == 200
        and f"Live document: generation {generation.number}" in shown.content.decode()
    )
    # Reloading (or going back to) the candidate's address: the generation it became.
    again = admin.get(page)
    assert (again.status_code, again["Location"]) == (302, url)


def test_a_discarded_candidates_address_is_still_not_found(admin):
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    admin.post(reverse("candidate-discard", args=[candidate.pk]))
    # Another candidate applied meanwhile does not claim the discarded one's address.
    other = apply_config(CHANGED + "\n# other\n", candidate=True)
    admin.post(reverse("candidate-apply", args=[other.pk]))

    assert admin.get(reverse("candidate-detail", args=[candidate.pk])).status_code == 404


def test_the_editors_check_answers_each_problem_at_its_line_and_stores_nothing(admin, client):
    url = reverse("setup-check")
    broken = CHANGED.replace("binding: inbox", "binding: inbx")
    line = broken.splitlines().index("        binding: inbx") + 1

    found = client.post(url, {"document": broken})
    valid = client.post(url, {"document": CHANGED})
    empty = client.post(url, {"document": ""})

    assert found.status_code == 200
    (problem,) = found.json()["problems"]
    assert problem["line"] == line and "unknown binding 'inbx'" in problem["message"]
    assert (valid.status_code, valid.json()) == (200, {"problems": []})
    assert empty.status_code == 400 and empty.json()["problems"][0]["message"].startswith("document: ")
    assert client.get(url).status_code == 405
    assert not candidates().exists()
