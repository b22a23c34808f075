"""In a real browser: a control the server refuses (409, or 400 for bad input)
shows the server's message in place — skip and reroute on the Work page's rows and on the Event
page, and the dead letters page's reroute — under the Content-Security-Policy (no inline
handlers: static/js/console.js swaps the statuses marked with ``data-swap-statuses``)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from controls import events as controls
from tests.controls.controlkit import holding_work
from tests.routing.factories import UserFactory
from tests.routing.routerkit import apply, router

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "browser-refusals-password-5"


@pytest.fixture
def data(clock, test_handlers):
    """An operator who may skip and reroute, and a Work held by an Event that keeps failing,
    with a later Event waiting behind it."""
    user = UserFactory(username="operator")
    user.set_password(PASSWORD)
    user.save()
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label__in=["routing", "worklife"]))
    apply(clock)
    r = router(clock)
    work_id, stuck, later = holding_work(clock, r)
    r.close()
    return {"work_id": work_id, "stuck": stuck, "later": later}


@pytest.fixture
def page(live_server, browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.errors = []
    page.dialogs = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))

    def confirm(dialog):
        page.dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", confirm)
    page.goto(live_server.url + reverse("login"))
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + reverse("console-home"))
    yield page
    context.close()


def refused_in_place(page, click: str, alert: str, status: int = 409) -> str:
    """Click a control, wait for the refusal, and return the text of the alert it swapped in."""
    with page.expect_response(lambda r: r.status == status):
        page.click(click)
    page.wait_for_selector(alert, timeout=5000)
    return page.locator(alert).inner_text()


def test_work_page_row_skip_refused_shows_the_servers_message(live_server, data, page, clock):
    later = data["later"]
    page.goto(live_server.url + reverse("work-detail", args=[data["work_id"]]))
    # Someone else settles the Event after the page was rendered.
    controls.event_skip(seq=later.seq, user="alice", clock=clock)
    message = refused_in_place(
        page, f"#unrouted-{later.seq} >> text=Skip", f"#unrouted-{later.seq} .control-error"
    )
    assert "only an unrouted Event can be skipped" in message
    assert page.errors == []


def test_event_page_skip_and_reroute_refused_show_the_servers_message(live_server, data, page, clock):
    stuck = data["stuck"]
    url = live_server.url + reverse("event-detail", args=[stuck.seq])
    page.goto(url)
    controls.event_skip(seq=stuck.seq, user="alice", clock=clock)
    message = refused_in_place(page, "#event-route >> text=Skip", "#event-route .control-error")
    assert "only an unrouted Event can be skipped" in message

    # Skipped: the page offers Reroute; someone reroutes it first.
    page.goto(url)
    copy = controls.event_reroute(seq=stuck.seq, user="alice", clock=clock)
    message = refused_in_place(page, "#event-route >> text=Reroute", "#event-route .control-error")
    assert f"already rerouted as the copy #{copy.copy_seq}" in message
    assert page.errors == []


def test_dead_letters_reroute_bad_selection_shows_the_servers_message(live_server, data, page, clock):
    controls.event_skip(seq=data["stuck"].seq, user="alice", clock=clock)
    page.goto(live_server.url + reverse("dead-letters"))
    message = refused_in_place(
        page,
        "#dead-letter-form button[type=submit]",
        "#dead-letter-list .errorlist[role=alert]",
        status=400,
    )
    assert "select at least one Event to reroute" in message
    assert page.errors == []
