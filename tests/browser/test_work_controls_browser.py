"""The Work page's operator controls in a real browser: htmx asks for confirmation, swaps the
controls with what the control did, and shows the server's refusal (409) and bad input (400)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from tests.routing.factories import UserFactory
from tests.routing.routerkit import apply
from tests.worklife.factories import AttemptFactory, WorkFactory
from worklife.models import Work

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-controls-password-3"


@pytest.fixture
def data(clock, test_handlers):
    """An operator with every Work control, the live configuration and two running Works."""
    user = UserFactory(username="operator")
    user.set_password(PASSWORD)
    user.save()
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="worklife"))
    apply(clock)
    works = []
    for _ in range(2):
        work = WorkFactory(scope="acme", binding="triage", status="running")
        AttemptFactory(work=work, number=1, binding="triage", state="running")
        works.append(work)
    return works


def test_d4_r48_r30_work_controls_in_chromium(live_server, data, browser):
    base = live_server.url
    errors: list[str] = []
    dialogs: list[str] = []
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))

    def confirm(dialog):
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", confirm)
    first, second = data
    page.goto(base + reverse("work-detail", args=[first.pk]))
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(base + reverse("work-detail", args=[first.pk]))

    # Cancel: confirmed, then the controls say what happened and the state swaps out of band.
    with page.expect_response(lambda r: r.url.endswith(reverse("work-cancel", args=[first.pk]))):
        page.click("#work-controls >> text=Cancel Work")
    assert dialogs and dialogs[-1].startswith(f"Cancel Work {first.pk}?")
    page.wait_for_function(
        "() => document.querySelector('#work-controls').innerText.includes('cancelled by operator')"
    )
    assert "cancelled" in page.locator("#work-summary").inner_text()
    assert page.locator("#work-controls a.button").count() == 0
    assert Work.objects.get(pk=first.pk).status == "cancelled"

    # Rebind to a binding the scope lacks: the 409 refusal is shown in place.
    page.goto(base + reverse("work-detail", args=[second.pk]))
    page.click("#work-rebind summary")
    page.fill("#rebind-binding", "ghost")
    with page.expect_response(lambda r: r.status == 409):
        page.click("#work-rebind button[type=submit]")
    page.wait_for_selector("#work-controls .control-error")
    assert "unknown binding 'ghost'" in page.locator("#work-controls .control-error").inner_text()

    # Send input with data that is not JSON: the 400 names the field, what was typed stays.
    page.click("#work-send summary")
    page.fill("#send-type", "operator.note")
    page.fill("#send-data", "{nope")
    with page.expect_response(lambda r: r.status == 400):
        page.click("#work-send button[type=submit]")
    page.wait_for_function(
        "() => (document.querySelector('#work-controls .control-error') || {}).innerText?.includes('data: invalid JSON')"
    )
    assert page.locator("#send-data").input_value() == "{nope"
    page.fill("#send-data", '{"text": "look again"}')
    with page.expect_response(lambda r: r.status == 200 and r.url.endswith("/send/")):
        page.click("#work-send button[type=submit]")
    page.wait_for_function(
        "() => document.querySelector('#work-controls').innerText.includes('sent to Work')"
    )
    assert errors == []
