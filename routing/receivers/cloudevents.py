"""CloudEvents senders (``kind: cloudevents``): a structured-mode CloudEvent
(``application/cloudevents+json``, or ``application/json``) authenticated by a Bearer token
(``auth: bearer``, the default), basic auth (``auth: basic`` with ``username``) or an HMAC of the
body (``auth: hmac`` with ``header``, ``algorithm``, ``encoding`` and ``prefix``, as for
``generic-hmac``).

The Event is the one sent. Its ``scope`` defaults to the receiver's; one it names must be the
receiver's scope or a scope below it: a receiver's secret opens that part of the tree only.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from routing.receivers.mapping import Mapped, invalid, json_object, templated
from routing.receivers.spec import Kind, ReceiverSpec
from routing.receivers.verify import (
    Delivery,
    auth_settings_problems,
    check_authorization,
    check_hmac,
    hmac_settings_problems,
)

DEFAULT_HMAC_HEADER = "X-Signature"
HMAC_KEYS = ("header", "algorithm", "encoding", "prefix")


def check(settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``auth`` (bearer, basic or hmac) with ``username`` (basic) or the HMAC's keys (hmac)."""
    problems = auth_settings_problems(settings, schemes=("bearer", "basic", "hmac"))
    if settings.get("auth") == "hmac":
        problems.extend(hmac_settings_problems(settings, default_header=DEFAULT_HMAC_HEADER))
    else:
        problems.extend((key, "only used with auth: hmac") for key in HMAC_KEYS if key in settings)
    return problems


def verify(
    spec: ReceiverSpec, delivery: Delivery, secret: bytes, *, now: datetime, replay_window: bool = True
) -> tuple[str, ...]:
    """Check the Authorization header, or the HMAC header, against the secret."""
    settings = spec.settings
    auth = settings.get("auth", "bearer")
    if auth == "hmac":
        check_hmac(
            delivery,
            secret,
            header=settings.get("header", DEFAULT_HMAC_HEADER),
            algorithm=settings.get("algorithm", "sha256"),
            encoding=settings.get("encoding", "hex"),
            prefix=settings.get("prefix", ""),
        )
    else:
        check_authorization(delivery, secret, scheme=auth, username=settings.get("username", ""))
    return ()


def map_delivery(spec: ReceiverSpec, delivery: Delivery) -> Mapped:
    """The CloudEvent as sent, with the receiver's scope when it names none."""
    event = json_object(delivery, sender="a CloudEvents sender (structured mode)")
    scope = event.get("scope")
    if scope is None:
        event = {**event, "scope": spec.scope}
    elif not isinstance(scope, str) or not (scope == spec.scope or scope.startswith(spec.scope + "/")):
        raise invalid(
            f"receiver {spec.name} delivers to scope {spec.scope!r} and the scopes below it, not {scope!r}",
            field="scope",
        )
    return Mapped(events=(templated(event, spec.settings, delivery=delivery, keys=KIND.templates),))


KIND = Kind(
    name="cloudevents",
    summary="CloudEvents (structured mode): Bearer, basic auth or an HMAC header; scope defaults to the receiver's",
    keys=("auth", "username", *HMAC_KEYS),
    check=check,
    verify=verify,
    map=map_delivery,
)
