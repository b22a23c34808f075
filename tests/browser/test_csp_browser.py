"""The Content-Security-Policy in a real browser: every console page and the
admin's pages load and work without a single violation, though the policy allows no inline
script or style."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.browser.browserkit import RECORD_VIOLATIONS
from tests.causal.factories import EventFactory
from tests.routing.factories import UserFactory, live_scopes
from tests.worklife.factories import WorkFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-csp-password-4"


@pytest.fixture
def data():
    user = UserFactory(username="admin", is_staff=True, is_superuser=True)
    user.set_password(PASSWORD)
    user.save()
    live_scopes("acme")
    root = EventFactory(scope="acme", type="demo.opened", route_state="routed")
    EventFactory(scope="acme", type="demo.child", root=root, parent=root, depth=1)
    work = WorkFactory(scope="acme", status="running", binding="agent")
    return {"user": user, "root": root, "work": work}


def test_no_page_violates_the_content_security_policy(live_server, data, browser):
    base = live_server.url
    context = browser.new_context()
    context.add_init_script(RECORD_VIOLATIONS)
    page = context.new_page()
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: console_errors.append(str(error)))

    seen: dict[str, list[str]] = {}

    def visit(url: str) -> None:
        response = page.goto(base + url)
        assert response is not None and response.status == 200, url
        assert "'unsafe-inline'" not in response.headers["content-security-policy"]
        page.wait_for_load_state("networkidle")
        seen[url] = page.evaluate("window.__cspViolations")

    visit(reverse("login"))
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(re.escape(base + reverse("console-home"))))

    root, work = data["root"], data["work"]
    for url in [
        reverse("console-home"),
        reverse("event-list"),
        reverse("event-detail", args=[root.seq]),
        reverse("work-list"),
        reverse("work-detail", args=[work.pk]),
        reverse("config-list"),
        reverse("trace"),
        reverse("causal-root", args=[root.seq]),
        reverse("causal-diagnostics"),
        reverse("dead-letters"),
        reverse("doctor"),
        reverse("work-create"),
        reverse("admin:index"),
        reverse("admin:auth_user_changelist"),
        reverse("admin:auth_user_change", args=[data["user"].pk]),
        reverse("admin:routing_apitoken_add"),
        reverse("admin:causal_event_changelist"),
        reverse("admin:causal_event_change", args=[root.seq]),
    ]:
        visit(url)
        # htmx runs under the policy: it is loaded and injected no style of its own.
        if not url.startswith("/admin/"):
            assert page.evaluate("typeof htmx") == "object", url

    # The admin works under the policy: adding an API token through its form shows the secret
    # once, selected when focused (static/js/select-on-focus.js, not an inline handler).
    visit(reverse("admin:auth_user_changelist"))
    assert page.locator("#changelist-search").is_visible()
    visit(reverse("admin:routing_apitoken_add"))
    page.select_option("#id_user", str(data["user"].pk))
    page.fill("#id_name", "csp-check")
    page.click("input[name=_save]")
    page.wait_for_selector("#api-token-secret")
    seen["token created"] = page.evaluate("window.__cspViolations")
    page.focus("#api-token-secret")
    secret = page.input_value("#api-token-secret")
    selected = page.evaluate("[document.activeElement.selectionStart, document.activeElement.selectionEnd]")
    assert secret and selected == [0, len(secret)]

    assert {url: found for url, found in seen.items() if found} == {}
    assert [error for error in console_errors if "Content Security Policy" in error] == []
