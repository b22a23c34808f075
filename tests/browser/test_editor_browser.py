"""In a real browser: the setup session's configuration editor (CodeMirror,
static/codemirror/editor.js) numbers its lines, marks the server's problems, and each problem is
a link that puts the cursor on its line; without JavaScript the textarea still posts and the
links open the numbered copy at the line; all under the strict Content-Security-Policy."""

from __future__ import annotations

import re

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.urls import reverse

from routing.models import Generation, GenerationKind
from tests.browser.browserkit import RECORD_VIOLATIONS, serious, set_document
from tests.routing.factories import DEFAULT_TEST_CONFIG, apply_config, user_with_role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-editor-password-39"
# A document whose one problem is far down: 95 lines of notes, then the test configuration
# with an unknown policy.
NOTES = "".join(f"# note {n}\n" for n in range(95))
BROKEN = NOTES + DEFAULT_TEST_CONFIG.replace("policy: drop", "policy: strat")
BAD_LINE = BROKEN.splitlines().index("        policy: strat") + 1
FIXED = NOTES + DEFAULT_TEST_CONFIG
# Recorded before any page script runs (DevTools' init scripts are not subject to the policy).


@pytest.fixture
def admin():
    user = user_with_role("admin", username="ada")
    user.set_password(PASSWORD)
    user.save()
    apply_config()
    return user


def open_page(browser, live_server, *, javascript: bool = True, width: int = 1280):
    context = browser.new_context(viewport={"width": width, "height": 900}, java_script_enabled=javascript)
    context.add_init_script(RECORD_VIOLATIONS)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    # A refused save (400) is logged as a failed load: expected. Anything else is not.
    page.on(
        "console",
        lambda message: (
            message.type == "error"
            and not message.text.startswith("Failed to load resource")
            and page.errors.append(message.text)
        ),
    )
    # Signed in straight to the editor: the home page's live socket has no server here (this test
    # server speaks HTTP only), and its failure is not the editor's.
    page.goto(live_server.url + reverse("login") + "?next=" + reverse("setup"))
    page.fill("#id_username", "ada")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + reverse("setup"))
    return context, page


def save_broken(page, live_server) -> None:
    page.goto(live_server.url + reverse("setup"))
    page.locator("#setup-editor .cm-editor").wait_for()
    set_document(page, BROKEN)
    with page.expect_response(lambda r: r.url.endswith(reverse("candidate-create")) and r.status == 400):
        page.click("#setup-form button[type=submit]")
    page.locator("#setup-problem-list").wait_for()
    page.locator("#setup-editor .cm-editor").wait_for()


def cursor_line(page) -> int:
    """The number in the gutter of the line holding the cursor."""
    return int(page.locator("#setup-editor .cm-lineNumbers .cm-activeLineGutter").inner_text())


def in_view(page, selector: str) -> bool:
    """Whether the element is inside the window and inside every scrolling box around it."""
    return page.locator(selector).evaluate(
        """(element) => {
          const box = element.getBoundingClientRect();
          if (box.bottom <= 0 || box.top >= window.innerHeight) return false;
          for (let node = element.parentElement; node; node = node.parentElement) {
            const style = getComputedStyle(node);
            if (!/(auto|scroll)/.test(style.overflowY)) continue;
            const outer = node.getBoundingClientRect();
            if (box.bottom <= outer.top || box.top >= outer.bottom) return false;
          }
          return true;
        }"""
    )


def test_the_editors_error_link_moves_the_cursor(browser, live_server, admin, tmp_path):
    context, page = open_page(browser, live_server)
    save_broken(page, live_server)
    assert not Generation.objects.filter(kind=GenerationKind.CANDIDATE).exists()

    # The problem is listed, as a link to its line, and marked in the editor at that line.
    link = page.locator(f"#setup-problem-list a[href='#line-{BAD_LINE}']")
    assert link.inner_text() == f"line {BAD_LINE}"
    assert "unknown policy 'strat'" in page.locator("#setup-problem-list").inner_text()
    assert page.locator("#setup-editor .cm-lint-marker-error").count() >= 1
    assert page.locator("#id_document").is_hidden()
    assert page.locator("#setup-editor .doc-lines").is_hidden()  # the editor shows the lines

    # Away from it, then the link: the cursor is on the line, visible, and the editor focused.
    page.locator("#setup-editor .cm-content").click()
    page.keyboard.press("Control+Home")
    assert cursor_line(page) == 1
    page.evaluate("window.scrollTo(0, 0)")
    link.click()
    page.wait_for_function(
        "(line) => document.querySelector('#setup-editor .cm-activeLineGutter')?.textContent === String(line)",
        arg=BAD_LINE,
    )
    assert cursor_line(page) == BAD_LINE
    assert page.evaluate("document.activeElement.classList.contains('cm-content')")
    assert not page.url.endswith(f"#line-{BAD_LINE}")  # the editor took the click, not the copy
    page.wait_for_function(
        "() => { const l = document.querySelector('#setup-editor .cm-activeLine');"
        " const s = document.querySelector('#setup-editor .cm-scroller').getBoundingClientRect();"
        " const b = l && l.getBoundingClientRect();"
        " return b && b.top >= s.top && b.bottom <= s.bottom && b.top >= 0 && b.bottom <= innerHeight; }"
    )
    assert in_view(page, "#setup-editor .cm-activeLine")
    assert page.locator("#setup-editor .cm-activeLine").inner_text() == "        policy: strat"
    page.screenshot(path=tmp_path / "editor-at-problem.png")

    # Typing there fixes it, and the form posts the editor's text.
    page.keyboard.press("End")
    for _ in range(len("strat")):
        page.keyboard.press("Backspace")
    page.keyboard.type("drop")
    assert page.locator("#id_document").input_value() == FIXED
    page.click("#setup-form button[type=submit]")
    page.wait_for_url("**/config/candidates/*/")
    assert Generation.objects.get(kind=GenerationKind.CANDIDATE).document == FIXED
    assert page.errors == []
    context.close()


def test_editor_without_javascript_still_submits(browser, live_server, admin, tmp_path):
    context, page = open_page(browser, live_server, javascript=False)
    page.goto(live_server.url + reverse("setup"))
    assert page.locator(".cm-editor").count() == 0
    page.fill("#id_document", BROKEN)
    page.click("#setup-form button[type=submit]")
    page.locator("#setup-problem-list").wait_for()

    # The link opens the numbered copy at the line, scrolled into view.
    link = page.locator(f"#setup-problem-list a[href='#line-{BAD_LINE}']")
    link.click()
    page.wait_for_url(re.compile(f"#line-{BAD_LINE}$"))
    assert in_view(page, f"#line-{BAD_LINE}")
    assert "unknown policy 'strat'" in page.locator(f"#line-{BAD_LINE} .doc-problem").inner_text()
    page.screenshot(path=tmp_path / "copy-at-problem.png")

    # The textarea kept the text; fixed, it is stored.
    assert page.locator("#id_document").input_value() == BROKEN
    page.fill("#id_document", FIXED)
    page.click("#setup-form button[type=submit]")
    page.wait_for_url("**/config/candidates/*/")
    # A plain form posts a textarea's line breaks as CRLF; the candidate keeps the document's own.
    assert Generation.objects.get(kind=GenerationKind.CANDIDATE).document == FIXED
    context.close()


def test_the_editor_runs_under_the_strict_policy(browser, live_server, admin):
    context, page = open_page(browser, live_server)
    response = page.goto(live_server.url + reverse("setup"))
    policy = response.headers["content-security-policy"]
    assert (
        "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy and "'unsafe-hashes'" not in policy
    )
    style_src = re.search(r"style-src ([^;]*)", policy).group(1).split()
    assert style_src[0] == "'self'" and len(style_src) == 2 and style_src[1].startswith("'nonce-")
    page.locator("#setup-editor .cm-editor").wait_for()
    # CodeMirror's style element carries the nonce, and its styles apply (line numbers, markers).
    assert page.evaluate("[...document.querySelectorAll('style')].every((s) => s.nonce !== '')")
    assert page.locator(".cm-gutters").evaluate("e => getComputedStyle(e).display") == "flex"
    # A refused save swaps the form in again: the new one is an editor too, still no violation.
    set_document(page, BROKEN)
    with page.expect_response(lambda r: r.status == 400):
        page.click("#setup-form button[type=submit]")
    page.locator("#setup-editor .cm-lint-marker-error").first.wait_for()
    assert page.evaluate("window.__cspViolations") == []
    assert [error for error in page.errors if "Content Security Policy" in error] == []
    assert page.errors == []
    # A page without the editor asks for no nonce: its policy has none.
    other = page.goto(live_server.url + reverse("event-list"))
    assert "nonce-" not in other.headers["content-security-policy"]
    context.close()


@pytest.mark.parametrize("width", [1280, 400])
def test_axe_finds_no_serious_violation_in_the_editor(browser, live_server, admin, tmp_path, width):
    context, page = open_page(browser, live_server, width=width)
    axe = Axe()
    page.goto(live_server.url + reverse("setup"))
    page.locator("#setup-editor .cm-editor").wait_for()
    found = {"editor": serious(axe.run(page))}
    save_broken(page, live_server)
    page.locator(f"#setup-problem-list a[href='#line-{BAD_LINE}']").click()
    found["editor with a problem"] = serious(axe.run(page))
    page.screenshot(path=tmp_path / f"editor-{width}.png", full_page=True)
    context.close()
    assert {label: lines for label, lines in found.items() if lines} == {}


def test_the_editor_marks_a_problem_as_it_is_typed_before_any_save(browser, live_server, admin):
    context, page = open_page(browser, live_server)
    page.locator("#setup-editor .cm-editor").wait_for()
    checks = []
    page.on(
        "request", lambda request: request.url.endswith(reverse("setup-check")) and checks.append(request)
    )
    set_document(page, BROKEN)

    # Marked at its line by the server's check, with nothing posted to save.
    page.locator("#setup-editor .cm-lint-marker-error").first.wait_for(timeout=10_000)
    marked = page.locator("#setup-editor .cm-lintRange-error").first.inner_text()
    assert "strat" in marked
    assert checks and not Generation.objects.filter(kind=GenerationKind.CANDIDATE).exists()
    # Fixed as typed: the marker goes, still without a save.
    set_document(page, FIXED)
    page.locator("#setup-editor .cm-lint-marker-error").first.wait_for(state="detached", timeout=10_000)
    assert not Generation.objects.filter(kind=GenerationKind.CANDIDATE).exists()
    assert page.errors == [] and page.evaluate("window.__cspViolations") == []
    context.close()


def test_saving_a_candidate_and_coming_back_to_the_editor_breaks_no_policy(browser, live_server, admin):
    context, page = open_page(browser, live_server)
    page.locator("#setup-editor .cm-editor").wait_for()
    set_document(page, FIXED)
    page.click("#setup-form button[type=submit]")
    page.wait_for_url("**/config/candidates/*/")
    assert page.evaluate("window.__cspViolations") == []
    page.goto(live_server.url + reverse("setup"))
    page.locator("#setup-editor .cm-editor").wait_for()
    assert page.evaluate("window.__cspViolations") == [] and page.errors == []
    context.close()
