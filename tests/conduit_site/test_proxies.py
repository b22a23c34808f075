"""Sign-in lockouts behind a reverse proxy key on the real client."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from django.urls import reverse

from conduit_site.proxies import client_ip
from tests.conduit_site.sitekit import PASSWORD

pytestmark = pytest.mark.django_db

WRONG = "not-the-password-9"
PROXY = "10.0.0.5"
VICTIM = "203.0.113.7"
ATTACKER = "198.51.100.9"


def sign_in(client, password: str, *, peer: str, forwarded: str | None = None):
    headers = {"X-Forwarded-For": forwarded} if forwarded is not None else {}
    return client.post(
        reverse("login"), {"username": "operator", "password": password}, REMOTE_ADDR=peer, headers=headers
    )


def address(meta: dict[str, str]) -> str | None:
    return client_ip(RequestFactory().get("/", **meta))


def test_client_address_is_read_from_the_right_behind_trusted_proxies_only(settings):
    settings.CONDUIT_TRUSTED_PROXIES = ["10.0.0.0/24", "::1"]
    forged = {"HTTP_X_FORWARDED_FOR": f"1.2.3.4, {VICTIM}"}
    assert address({"REMOTE_ADDR": PROXY, **forged}) == VICTIM
    assert address({"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": f"1.2.3.4, {VICTIM}, 10.0.0.9"}) == VICTIM
    assert address({"REMOTE_ADDR": "::1", "HTTP_X_FORWARDED_FOR": "2001:db8::1"}) == "2001:db8::1"
    # An untrusted peer's header is ignored, as is a malformed or missing one.
    assert address({"REMOTE_ADDR": ATTACKER, **forged}) == ATTACKER
    assert address({"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": "nonsense"}) == PROXY
    assert address({"REMOTE_ADDR": PROXY}) == PROXY
    settings.CONDUIT_TRUSTED_PROXIES = []
    assert address({"REMOTE_ADDR": PROXY, **forged}) == PROXY


def test_forged_forwarded_for_from_an_untrusted_peer_changes_nothing(client, operator, settings):
    """Five wrong passwords from one peer under five forged addresses lock out that peer only."""
    settings.CONDUIT_TRUSTED_PROXIES = [PROXY]
    for n in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, WRONG, peer=ATTACKER, forwarded=f"192.0.2.{n + 1}")
    assert sign_in(client, PASSWORD, peer=ATTACKER, forwarded="192.0.2.99").status_code == 429
    # Forging the victim's address from outside the proxy locked out nobody else.
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, WRONG, peer=ATTACKER, forwarded=VICTIM)
    assert sign_in(client, PASSWORD, peer=PROXY, forwarded=VICTIM).status_code == 302


def test_behind_the_proxy_the_real_client_is_locked_out_alone(client, operator, settings):
    settings.CONDUIT_TRUSTED_PROXIES = [PROXY]
    for n in range(settings.AXES_FAILURE_LIMIT):
        # The attacker's own left-hand entries vary; the proxy appends the real peer.
        sign_in(client, WRONG, peer=PROXY, forwarded=f"192.0.2.{n + 1}, {ATTACKER}")
    assert sign_in(client, PASSWORD, peer=PROXY, forwarded=ATTACKER).status_code == 429
    # Everyone else behind the same proxy still signs in.
    assert sign_in(client, PASSWORD, peer=PROXY, forwarded=VICTIM).status_code == 302


SECRET = "the-proxy-secret"


def test_with_a_proxy_secret_forwarded_addresses_are_read_only_from_requests_carrying_it(settings):
    settings.CONDUIT_TRUSTED_PROXIES = [PROXY]
    settings.CONDUIT_PROXY_SECRET = SECRET
    forged = {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": VICTIM}
    assert address(forged) == PROXY
    assert address({**forged, "HTTP_X_CONDUIT_PROXY": "a-guess"}) == PROXY
    assert address({**forged, "HTTP_X_CONDUIT_PROXY": SECRET[:-1]}) == PROXY
    assert address({**forged, "HTTP_X_CONDUIT_PROXY": ""}) == PROXY
    assert address({**forged, "HTTP_X_CONDUIT_PROXY": SECRET}) == VICTIM
    # The secret does not make an untrusted peer a proxy.
    assert (
        address({"REMOTE_ADDR": ATTACKER, "HTTP_X_FORWARDED_FOR": VICTIM, "HTTP_X_CONDUIT_PROXY": SECRET})
        == ATTACKER
    )


def test_a_local_process_without_the_proxy_secret_locks_out_only_itself(client, operator, settings):
    """From the proxy's own address but without its secret (a process of the proxy's host),
    forged addresses are not read: the failures count against the peer."""
    settings.CONDUIT_TRUSTED_PROXIES = [PROXY]
    settings.CONDUIT_PROXY_SECRET = SECRET
    for n in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, WRONG, peer=PROXY, forwarded=f"192.0.2.{n + 1}")
    assert sign_in(client, PASSWORD, peer=PROXY, forwarded="192.0.2.99").status_code == 429
    # Through the proxy (with its secret) the victim is a client of its own, not locked out.
    response = client.post(
        reverse("login"),
        {"username": "operator", "password": PASSWORD},
        REMOTE_ADDR=PROXY,
        headers={"X-Forwarded-For": VICTIM, "X-Conduit-Proxy": SECRET},
    )
    assert response.status_code == 302


def test_check_deploy_warns_about_proxies_trusted_without_a_secret(settings):
    from django.core import checks

    def warnings() -> list[str]:
        found = checks.run_checks(tags=[checks.Tags.security], include_deployment_checks=True)
        return [m.id for m in found if m.id == "conduit.W002"]

    settings.CONDUIT_TRUSTED_PROXIES, settings.CONDUIT_PROXY_SECRET = [PROXY], ""
    assert warnings() == ["conduit.W002"]
    settings.CONDUIT_PROXY_SECRET = SECRET
    assert warnings() == []
    settings.CONDUIT_TRUSTED_PROXIES, settings.CONDUIT_PROXY_SECRET = [], ""
    assert warnings() == []
