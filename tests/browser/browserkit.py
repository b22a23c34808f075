"""Helpers of the browser tests: the console's pages to check, signing in, axe's serious
violations, the CSP violation recorder and the editor's document."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Permission
from django.urls import reverse

from tests.routing.factories import (
    UserFactory,
)

PASSWORD = "browser-a11y-password-5"


# Receivers on the Receivers page: one whose secret the server has, one whose file is missing.
RECEIVERS = """\
receivers:
  github: {kind: github, scope: acme, secret: {env: PATH}}
  slack: {kind: slack, scope: acme, secret: {file: missing/slack-signing-secret}}
"""


# The impacts that fail the test (axe also reports "minor" and "moderate").
BLOCKING = {"serious", "critical"}


@dataclass(frozen=True)
class Page:
    """A console page to check: its label, its URL from the world's data, and an optional step
    (on the Playwright page) that brings it to the state to check."""

    label: str
    url: Callable[[dict[str, Any]], str]
    step: Callable[[Any], None] | None = None


def run_trace(page) -> None:
    page.click(".trace-form button[type=submit]")
    page.wait_for_selector("#trace-result :is(table, ol, ul, p)")


def open_operations(page) -> None:
    """Swagger UI with an operation of each method open and a schema expanded."""
    page.wait_for_selector(".swagger-ui .opblock")
    page.locator(".opblock-get .opblock-summary-control").first.click()
    page.locator(".opblock-post .opblock-summary-control").first.click()
    page.wait_for_selector(".opblock.is-open .responses-wrapper")
    page.locator(".models button.json-schema-2020-12-accordion").first.click()


PAGES: list[Page] = [
    Page("home", lambda d: reverse("console-home")),
    Page("events", lambda d: reverse("event-list")),
    Page("event routed", lambda d: reverse("event-detail", args=[d["opened"].seq])),
    Page("event unrouted", lambda d: reverse("event-detail", args=[d["unrouted"].seq])),
    Page("event failed", lambda d: reverse("event-detail", args=[d["failed"].seq])),
    Page("work list", lambda d: reverse("work-list")),
    Page("work running", lambda d: reverse("work-detail", args=[d["work"].pk])),
    Page("work parked", lambda d: reverse("work-detail", args=[d["parked"].pk])),
    Page("work create", lambda d: reverse("work-create")),
    Page("dead letters", lambda d: reverse("dead-letters")),
    Page("configuration", lambda d: reverse("config-list")),
    Page("configuration setup", lambda d: reverse("setup")),
    Page("candidate", lambda d: reverse("candidate-detail", args=[d["candidate"].pk])),
    Page("trace", lambda d: reverse("trace") + "?scope=acme&sample=0"),
    Page("trace result", lambda d: reverse("trace") + "?scope=acme&sample=0", run_trace),
    Page("trace an event", lambda d: reverse("trace") + f"?event={d['opened'].seq}", run_trace),
    Page("causal root", lambda d: reverse("causal-root", args=[d["root"].seq])),
    Page("causal refusals", lambda d: reverse("causal-diagnostics")),
    Page("receivers", lambda d: reverse("receivers")),
    Page("doctor", lambda d: reverse("doctor")),
    Page("api docs", lambda d: reverse("api-docs"), open_operations),
    Page("api tokens", lambda d: reverse("admin:routing_apitoken_changelist")),
    Page("api token add", lambda d: reverse("admin:routing_apitoken_add")),
    Page("api token", lambda d: reverse("admin:routing_apitoken_change", args=[d["token"].pk])),
]


def serious(results) -> list[str]:
    """One line per serious or critical violation: rule, impact, and the nodes' selectors."""
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:5]}"
        for v in results.response["violations"]
        if v["impact"] in BLOCKING
    ]


def sign_in(page, base: str) -> None:
    page.goto(base + reverse("login"))
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(re.escape(base + reverse("console-home"))))


# Recorded before any page script runs; DevTools' init scripts are not subject to the policy.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


def set_document(page, text: str) -> None:
    """Replace the editor's whole document, as a paste would."""
    content = page.locator("#setup-editor .cm-content")
    content.click()
    page.keyboard.press("Control+a")
    content.evaluate(
        """(element, text) => {
          const data = new DataTransfer();
          data.setData("text/plain", text);
          element.dispatchEvent(new ClipboardEvent("paste", {clipboardData: data, bubbles: true, cancelable: true}));
        }""",
        text,
    )


def operator() -> None:
    user = UserFactory(username="operator")
    user.set_password(PASSWORD)
    user.save()
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="routing", codename__in=["skip_event", "reroute_event"]
        )
    )


def signed_in(browser, base: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(base + reverse("login"))
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(base + reverse("console-home"))
    return page
