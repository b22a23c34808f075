"""Signing in to the console and out: every console page asks for it first (D4)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.conduit_site.console.views.consolekit import text
from tests.conduit_site.sitekit import PASSWORD

pytestmark = pytest.mark.django_db


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
