"""Prometheus Alertmanager's webhook (``kind: alertmanager``, payload version 4).

Alertmanager authenticates with what its ``http_config`` sends: ``authorization`` (a Bearer
token, ``auth: bearer``, the default) or ``basic_auth`` (``auth: basic`` with ``username``); the
secret is the token or the password. One POST carries a group of alerts: each alert is one
Event. Alertmanager sends the same group again every ``group_interval`` and
``repeat_interval``: an alert already accepted is a duplicate, not a new Event.

The CloudEvent of each alert: ``id`` ``<group>/<fingerprint>/<status>/<startsAt>`` (``group``
the first 16 hex digits of the SHA-256 of ``groupKey``), so an alert firing and then resolved
are two Events, and firing again later (a new ``startsAt``) a third; ``type``
``alertmanager.alert.firing`` or ``alertmanager.alert.resolved``; ``source`` the
``externalURL``; ``subject`` the alert's ``alertname`` label; ``time`` ``startsAt`` (firing)
or ``endsAt`` (resolved); ``data`` the alert (``status``, ``labels``, ``annotations``,
``startsAt``, ``endsAt``, ``generatorURL``, ``fingerprint``) with the group's ``groupKey``,
``groupLabels``, ``receiver`` and ``externalURL`` beside it. What a later notification of the
same alert changes (an annotation's value) does not make a second Event: the first one stands.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from routing.acceptance.envelopes import RFC3339
from routing.config.receivers import DECLARED_KINDS, ReceiverSpec
from routing.receivers.mapping import Mapped, cloudevent, invalid, json_object, templated, text_at
from routing.receivers.spec import Kind
from routing.receivers.verify import Delivery, check_authorization

VERSION = "4"
STATUSES = ("firing", "resolved")
# The group's fields each alert's data carries (those that do not change with the group's members).
GROUP_FIELDS = ("groupKey", "groupLabels", "receiver", "externalURL")


def verify(
    spec: ReceiverSpec, delivery: Delivery, secret: bytes, *, now: datetime, replay_window: bool = True
) -> tuple[str, ...]:
    """Check the Authorization header against the secret."""
    check_authorization(
        delivery,
        secret,
        scheme=spec.settings.get("auth", "bearer"),
        username=spec.settings.get("username", ""),
    )
    return ()


def alert_id(group_key: str, alert: dict[str, Any]) -> str:
    """The Event id of one alert of a group (see the module's documentation)."""
    group = hashlib.sha256(group_key.encode("utf-8")).hexdigest()[:16]
    return f"{group}/{fingerprint_of(alert)}/{alert['status']}/{text_at(alert, 'startsAt')}"


def fingerprint_of(alert: dict[str, Any]) -> str:
    """The alert's ``fingerprint``; for a sender that omits it, a digest of its labels."""
    given = text_at(alert, "fingerprint")
    if given:
        return given
    labels = json.dumps(alert.get("labels") or {}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(labels.encode("utf-8")).hexdigest()[:16]


def map_delivery(spec: ReceiverSpec, delivery: Delivery) -> Mapped:
    """One CloudEvent per alert of the group, in the group's order."""
    payload = json_object(delivery, sender="Alertmanager")
    if payload.get("version") != VERSION:
        raise invalid(
            f"expected an Alertmanager webhook payload of version {VERSION!r}, got {payload.get('version')!r}",
            field="version",
        )
    group_key = payload.get("groupKey")
    if not isinstance(group_key, str):
        raise invalid("groupKey must be a string", field="groupKey")
    alerts = payload.get("alerts")
    if not isinstance(alerts, list) or not alerts:
        raise invalid("alerts must be a non-empty list of alerts", field="alerts")
    group = {name: payload[name] for name in GROUP_FIELDS if name in payload}
    source = text_at(payload, "externalURL") or "alertmanager"
    events = []
    for index, alert in enumerate(alerts):
        if not isinstance(alert, dict):
            raise invalid(f"alerts[{index}] must be an object", field=f"alerts[{index}]")
        status = alert.get("status")
        if status not in STATUSES:
            raise invalid(
                f"alerts[{index}].status must be firing or resolved, got {status!r}",
                field=f"alerts[{index}].status",
            )
        when = text_at(alert, "startsAt" if status == "firing" else "endsAt")
        mapped = cloudevent(
            id=alert_id(group_key, alert),
            source=source,
            type=f"alertmanager.alert.{status}",
            subject=text_at(alert, "labels", "alertname") or fingerprint_of(alert),
            time=when if RFC3339.match(when) and not when.startswith("0001-") else None,
            scope=spec.scope,
            data={**alert, **group},
        )
        events.append(templated(mapped, spec.settings, delivery=delivery, keys=KIND.templates))
    return Mapped(events=tuple(events))


KIND = Kind(
    declared=DECLARED_KINDS["alertmanager"],
    summary="Prometheus Alertmanager webhook (version 4): Bearer or basic auth; one Event per alert",
    verify=verify,
    map=map_delivery,
    repeats_may_differ=True,
)
