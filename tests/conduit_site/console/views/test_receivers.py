"""The Receivers page (each receiver of the live configuration, the URL to give
its sender, where its secret is, its last delivery and its refusals), linked from the
navigation; an Event's page names the receiver that accepted it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.urls import reverse

from tests.causal.factories import EventFactory
from tests.routing.factories import ReceiverCountFactory, UserFactory, apply_config, user_with_role

pytestmark = pytest.mark.django_db

DOCUMENT = """\
version: 1
scopes:
  - path: acme
  - path: acme/ops
receivers:
  github: {kind: github, scope: acme, secret: {env: TEST_RECEIVERS_PAGE_SECRET}}
  alerts:
    kind: alertmanager
    scope: acme/ops
    secret: {file: missing/alertmanager-token}
"""
SECRET = "page-secret-never-shown-3f9a"


@pytest.fixture
def receivers(monkeypatch):
    monkeypatch.setenv("TEST_RECEIVERS_PAGE_SECRET", SECRET)
    return apply_config(DOCUMENT)


@pytest.fixture
def viewer(client):
    client.force_login(user_with_role("viewer"))
    return client


def test_receivers_page_lists_url_secret_reference_last_delivery_and_refusals(viewer, receivers):
    older = EventFactory(accepted_by="receiver:github", type="github.push")
    newest = EventFactory(
        accepted_by="receiver:github",
        type="github.pull_request.opened",
        accepted_at=datetime(2026, 1, 5, 12, 30, tzinfo=UTC),
    )
    EventFactory(accepted_by="operator", type="other.thing")  # not a receiver's
    ReceiverCountFactory(receiver="github", outcome="signature_invalid", count=3)
    ReceiverCountFactory(receiver="github", outcome="timestamp_stale", count=1)
    ReceiverCountFactory(receiver="github", outcome="invalid_payload", count=2)
    ReceiverCountFactory(
        receiver="gone", outcome="signature_invalid", count=9
    )  # not in the live configuration

    response = viewer.get(reverse("receivers"))

    assert response.status_code == 200
    page = response.content.decode()
    assert "<code>http://testserver/hooks/github</code>" in page
    assert "<code>http://testserver/hooks/alerts</code>" in page
    assert SECRET not in page
    # The alertmanager receiver's file cannot be read here: the page says so (deliveries get 503).
    alerts = page[page.index('id="receiver-alerts"') : page.index('id="receiver-github"')]
    assert "unavailable" in alerts and "deliveries get 503" in alerts
    assert "none yet" in alerts
    github = page[page.index('id="receiver-github"') :]
    assert f'href="{reverse("event-detail", args=[newest.seq])}">#{newest.seq}</a>' in github
    assert f"#{older.seq}<" not in github
    assert '<span class="badge badge-refused">4</span>' in github  # signature failures: 3 invalid + 1 stale
    assert '<td class="num">2</td>' in github  # other refusals
    assert "gone" not in page


def test_a_viewer_sees_whether_a_secret_is_set_but_not_where_it_lives(viewer, receivers):
    ReceiverCountFactory(
        receiver="alerts",
        outcome="secret_unavailable",
        last_message="the receiver's secret is unavailable to the server: cannot read the file "
        "missing/alertmanager-token: No such file or directory",
    )

    page = viewer.get(reverse("receivers")).content.decode()

    alerts = page[page.index('id="receiver-alerts"') : page.index('id="receiver-github"')]
    github = page[page.index('id="receiver-github"') :]
    assert "unavailable" in alerts and "set" in github
    assert "alertmanager-token" not in page
    assert "TEST_RECEIVERS_PAGE_SECRET" not in page
    assert "secret_unavailable" in alerts  # the last refusal, without its detail


def test_an_admin_sees_where_each_secret_lives_and_why_it_is_unavailable(client, receivers):
    client.force_login(user_with_role("admin"))

    page = client.get(reverse("receivers")).content.decode()

    assert "<code>env TEST_RECEIVERS_PAGE_SECRET</code>" in page
    assert "cannot read the file missing/alertmanager-token" in page
    assert SECRET not in page


def test_receivers_page_reads_in_a_number_of_queries_independent_of_history(
    viewer, receivers, django_assert_max_num_queries
):
    viewer.get(reverse("receivers"))  # the session and the generation's receivers, read once
    EventFactory.create_batch(30, accepted_by="receiver:github")
    ReceiverCountFactory(receiver="github")

    # The session, its user and their permissions (3), the heartbeat banner (2: the loops, the
    # pauses in force), the live generation (1), the counts (1), the newest Event of each receiver (2).
    with django_assert_max_num_queries(9):
        assert viewer.get(reverse("receivers")).status_code == 200


def test_receivers_page_needs_a_login_and_the_viewer_permission(client, receivers):
    anonymous = client.get(reverse("receivers"))
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("login"))
    client.force_login(UserFactory(permissions=()))
    assert client.get(reverse("receivers")).status_code == 403


def test_receivers_page_without_receivers_says_so(viewer):
    assert "No configuration has been applied yet." in viewer.get(reverse("receivers")).content.decode()
    apply_config()
    assert "declares no receivers" in viewer.get(reverse("receivers")).content.decode()


def test_the_navigation_links_the_receivers_page(viewer, receivers):
    home = viewer.get(reverse("console-home")).content.decode()
    assert f'<a href="{reverse("receivers")}">Receivers</a>' in home
    page = viewer.get(reverse("receivers")).content.decode()
    assert f'<a href="{reverse("receivers")}" aria-current="page">Receivers</a>' in page


def test_receivers_page_refreshes_its_list_as_an_htmx_partial(viewer, receivers):
    response = viewer.get(reverse("receivers"), headers={"HX-Request": "true", "HX-Target": "receiver-list"})

    page = response.content.decode()
    assert page.lstrip().startswith('<section id="receiver-list"')
    assert "<nav" not in page


def test_event_page_names_the_receiver_that_accepted_it(viewer, receivers):
    by_receiver = EventFactory(accepted_by="receiver:github")
    by_user = EventFactory(accepted_by="erin")

    received = viewer.get(reverse("event-detail", args=[by_receiver.seq])).content.decode()
    typed = viewer.get(reverse("event-detail", args=[by_user.seq])).content.decode()

    assert f'by receiver <a href="{reverse("receivers")}#receiver-github">github</a>' in received
    assert "by erin</dd>" in typed and "by receiver" not in typed
