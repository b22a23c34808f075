"""In a real browser, under the Content-Security-Policy: an admin edits a
candidate from the live document, sees a problem inline at its line, fixes it, saves it, traces
against it (a refusal replaces the previous result), previews its impact and applies it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from causal.models import Event
from routing.acceptance.services import event_accept
from routing.config.selectors import live_generation
from routing.engine.options import RouterOptions
from routing.engine.router import build_router
from routing.models import Generation, GenerationKind
from tests.browser.browserkit import set_document
from tests.routing.factories import CHANGED, apply_config, user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-setup-password-10"


@pytest.fixture
def data(clock):
    """An admin, the default configuration live, and two Events routed by it (one dropped by
    the ``noise`` route the candidate removes, one unmatched)."""
    user = user_with_role("admin", username="ada")
    user.set_password(PASSWORD)
    user.save()
    apply_config()
    for n, kind in enumerate(("x.ping", "issue.opened")):
        event_accept(
            payload={"specversion": "1.0", "id": f"b{n}", "source": "mon", "type": kind, "scope": "acme"},
            clock=clock,
        )
    router = build_router(clock=clock, options=RouterOptions(workers=1))
    try:
        router.route_pending()
    finally:
        router.close()
    return {"ping": Event.objects.get(envelope_id="b0").seq}


@pytest.fixture
def page(live_server, browser, data):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.errors = []
    page.console_errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    # A refused request (400) is logged as a failed load: expected here, and so is the live
    # Event page's websocket, which the test server (WSGI, no websockets) cannot answer: the
    # browser's line, and htmx's ws extension logging the socket's error event. Anything else
    # (a Content-Security-Policy violation, a script error) is not.
    page.on(
        "console",
        lambda message: (
            message.type == "error"
            and not message.text.startswith(("Failed to load resource", "WebSocket connection to"))
            and message.text != "[object Event]"
            and page.console_errors.append(message.text)
        ),
    )
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(live_server.url + reverse("login"))
    page.fill("#id_username", "ada")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + reverse("console-home"))
    yield page
    context.close()


def test_edit_see_inline_error_fix_preview_impact_and_apply(page, live_server):
    page.goto(live_server.url + reverse("setup"))
    page.locator("#setup-editor .cm-editor").wait_for()
    assert "- slot: deploys" in page.locator("#id_document").input_value()  # starts from live

    # A typo: the problem is listed and marked at its line, the text kept for fixing, nothing
    # stored.
    broken = CHANGED.replace("binding: inbox", "binding: inbx")
    line = broken.splitlines().index("        binding: inbx") + 1
    set_document(page, broken)
    page.click("#setup-form button[type=submit]")
    problem = page.locator("#setup-problem-list li")
    problem.wait_for()
    assert problem.inner_text().startswith(
        f"line {line}: scopes[0].routes[3].binding: unknown binding 'inbx'"
    )
    page.locator("#setup-editor .cm-lint-marker-error").wait_for()
    assert page.locator("#setup-editor .cm-activeLine").inner_text() == "        binding: inbx"
    assert page.locator("#id_document").input_value() == broken
    assert not Generation.objects.filter(kind=GenerationKind.CANDIDATE).exists()

    # Fixed: saved as a candidate, and the candidate's page opens.
    set_document(page, CHANGED)
    page.click("#setup-form button[type=submit]")
    page.wait_for_url("**/config/candidates/*/")
    candidate = Generation.objects.get(kind=GenerationKind.CANDIDATE)
    assert page.locator("h1").inner_text().startswith(f"Candidate {candidate.pk}")
    assert "removed" in page.locator("#candidate-diff").inner_text()

    # A trace against it, then a refused one: the refusal replaces the result.
    page.locator("#trace-form textarea").fill(
        '{"source": "m", "type": "alert.fired", "scope": "acme", "data": {"id": 1}}'
    )
    page.click("#trace-form button[type=submit]")
    page.locator("#candidate-trace-result .badge-effect").wait_for()
    assert page.locator("#candidate-trace-result .badge-effect").inner_text() == "start"
    page.locator("#trace-form textarea").fill('{"source": "m", "type": "alert.fired", "scope": "nowhere"}')
    page.click("#trace-form button[type=submit]")
    page.locator("#candidate-trace-result [role=alert]").wait_for()
    assert "Refused (scope)" in page.locator("#candidate-trace-result").inner_text()
    assert page.locator("#candidate-trace-result .badge-effect").count() == 0

    # The impact preview: the dropped ping would be unmatched.
    page.fill("#id_events", "100")
    page.click("#impact-form button[type=submit]")
    page.locator("#impact-summary").wait_for(timeout=60_000)
    assert "1 of the 2 latest Events" in page.locator("#impact-summary").inner_text()
    assert page.locator("#impact-rollup tbody tr").inner_text().startswith("drop → unmatched\tnoise\t1")

    # Apply: the next generation, by ada.
    page.click("#candidate-apply")
    page.wait_for_url("**/config/?generation=*")
    generation = live_generation()
    assert (generation.number, generation.created_by, generation.document) == (2, "ada", CHANGED)
    assert "Live document: generation 2" in page.locator("#document").inner_text()
    assert page.errors == [] and page.console_errors == []


def test_trace_this_event_and_a_refusal_replaces_the_result(page, live_server, data):
    page.goto(live_server.url + reverse("event-detail", args=[data["ping"]]))
    assert '"type": "x.ping"' in page.locator("#event-raw-envelope").inner_text()
    page.click("#trace-this-event")
    page.wait_for_url(f"**/trace/?event={data['ping']}")
    page.click(".trace-form button[type=submit]")
    page.locator("#trace-result .badge-effect").wait_for()
    assert page.locator("#trace-result .badge-effect").inner_text() == "drop"

    page.locator(".trace-form textarea").fill('{"source": "m", "type": "x.ping", "scope": "nowhere"}')
    page.click(".trace-form button[type=submit]")
    page.locator("#trace-result [role=alert]").wait_for()
    assert "Refused (scope)" in page.locator("#trace-result").inner_text()
    assert page.locator("#trace-result .badge-effect").count() == 0
    assert page.errors == [] and page.console_errors == []


def test_after_apply_reload_and_back_show_the_applied_generation(live_server, browser, clock):
    from django.urls import reverse

    from routing.config.selectors import live_generation
    from tests.routing.factories import CHANGED, apply_config, user_with_role

    user = user_with_role("admin", username="ada")
    user.set_password(PASSWORD)
    user.save()
    apply_config()
    candidate = apply_config(CHANGED, candidate=True)
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    sign_in_as = live_server.url + reverse("login")
    page.goto(sign_in_as)
    page.fill("#id_username", "ada")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + reverse("console-home"))
    page.goto(live_server.url + reverse("candidate-detail", args=[candidate.pk]))

    page.click("#candidate-apply")
    page.wait_for_url("**/config/?generation=2#document")
    assert live_generation().number == 2
    # The address is the Configuration page's, and it says what was applied, once.
    assert page.locator("#config-applied").inner_text() == (
        f"Applied candidate {candidate.pk}: generation 2 is live."
    )
    for _ in ("reload", "back"):
        if _ == "reload":
            response = page.reload()
        else:
            response = page.go_back()
            page.wait_for_url("**/config/?generation=2#document")
        assert response is not None and response.status == 200
        assert "Live document: generation 2" in page.locator("#document").inner_text()
        assert page.locator("#config-applied").count() == 0
