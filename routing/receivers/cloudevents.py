"""CloudEvents senders (``kind: cloudevents``): a CloudEvent in any HTTP content mode (structured,
``application/cloudevents+json`` or ``application/json``; binary, ``ce-*`` headers and the data as
the body; batch, ``application/cloudevents-batch+json``), authenticated by a Bearer token
(``auth: bearer``, the default), basic auth (``auth: basic`` with ``username``) or an HMAC of the
body (``auth: hmac`` with ``header``, ``algorithm``, ``encoding`` and ``prefix``, as for
``generic-hmac``).

The Event is the one sent. Its ``scope`` defaults to the receiver's; one it names must be the
receiver's scope or a scope below it: a receiver's secret opens that part of the tree only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from routing.acceptance.binding import Mode, binary_event, content_mode
from routing.acceptance.envelopes import EnvelopeInvalid
from routing.config.receivers import DECLARED_KINDS, DEFAULT_HMAC_HEADER, ReceiverSpec
from routing.receivers.mapping import Mapped, invalid, json_body, json_object, templated
from routing.receivers.spec import Kind
from routing.receivers.verify import Delivery, check_authorization, check_hmac


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
    """The CloudEvents as sent (one, or a batch's), each with the receiver's scope when it
    names none."""
    mode = content_mode(delivery.media_type, delivery.headers)
    if mode is Mode.BINARY:
        try:
            sent = [binary_event(delivery.headers, delivery.body)]
        except EnvelopeInvalid as exc:
            raise invalid(exc.message, field=exc.field) from None
    elif mode is Mode.BATCH:
        batch = json_body(delivery, sender="a CloudEvents sender (batch mode)")
        if not isinstance(batch, list) or not all(isinstance(event, dict) for event in batch):
            raise invalid("a batch (application/cloudevents-batch+json) is a JSON array of Events")
        sent = batch
    else:
        sent = [json_object(delivery, sender="a CloudEvents sender (structured mode)")]
    return Mapped(
        events=tuple(
            templated(_scoped(spec, event), spec.settings, delivery=delivery, keys=KIND.templates)
            for event in sent
        )
    )


def _scoped(spec: ReceiverSpec, event: dict[str, Any]) -> dict[str, Any]:
    scope = event.get("scope")
    if scope is None:
        return {**event, "scope": spec.scope}
    if not isinstance(scope, str) or not (scope == spec.scope or scope.startswith(spec.scope + "/")):
        raise invalid(
            f"receiver {spec.name} delivers to scope {spec.scope!r} and the scopes below it, not {scope!r}",
            field="scope",
        )
    return event


KIND = Kind(
    declared=DECLARED_KINDS["cloudevents"],
    summary="CloudEvents (structured, binary or batch mode): Bearer, basic auth or an HMAC header; scope defaults to the receiver's",
    verify=verify,
    map=map_delivery,
)
