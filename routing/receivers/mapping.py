"""From a verified delivery to CloudEvents: reading the body, the optional templates a receiver
declares (``type``, ``subject``…), and the structured-mode CloudEvent acceptance takes.

A body is refused when it nests deeper than ``CONDUIT_MAX_JSON_DEPTH`` less one (the envelope
around its data takes a level), before it is parsed; the Events built from it are then offered
as depth-checked.

A mapping is a pure function of the delivery and the receiver's declaration: the same delivery
(a redelivery, a retry) maps to the same Event, which acceptance then stores once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs

from infra.times import timestamp
from routing.acceptance.envelopes import (
    EnvelopeInvalid,
    check_text_depth,
    kind_of,
    max_json_depth,
    parse_json,
)
from routing.config.receivers import Template, parse_template
from routing.receivers.verify import Delivery, Refusal, Refused

JSON_MEDIA_TYPES = frozenset({"application/json", "application/cloudevents+json"})
FORM_MEDIA_TYPE = "application/x-www-form-urlencoded"


@dataclass(frozen=True, slots=True)
class Mapped:
    """What a delivery maps to: Events to accept (structured-mode CloudEvents with ``scope``),
    or an answer the sender expects instead (a challenge, a ping's reply), nothing stored."""

    events: tuple[dict[str, Any], ...] = ()
    reply: dict[str, Any] | None = None
    notes: tuple[str, ...] = field(default=())


def invalid(message: str, *, field: str | None = None) -> Refused:
    """A refusal of a verified delivery that cannot be mapped (400)."""
    return Refused(Refusal.INVALID_PAYLOAD, message, field=field)


# --- bodies ------------------------------------------------------------------------------------


def is_json(media_type: str) -> bool:
    """Whether ``media_type`` is JSON (``application/json``, ``…+json``)."""
    return media_type in JSON_MEDIA_TYPES or media_type.endswith("+json")


def json_body(delivery: Delivery, *, sender: str, form_field: str | None = None) -> Any:
    """The delivery's JSON document. With ``form_field``, a form-encoded body holding the JSON
    in that field is read too (GitHub's ``payload``). Raises :class:`Refused`: another media
    type (415) or a body that is not one JSON document (400)."""
    media_type = delivery.media_type
    if form_field is not None and media_type == FORM_MEDIA_TYPE:
        return _parse(_form_field(delivery.body, form_field), where=f"the form field {form_field!r}")
    if not is_json(media_type):
        accepted = "application/json" + (f" or {FORM_MEDIA_TYPE}" if form_field else "")
        raise Refused(
            Refusal.UNSUPPORTED_MEDIA_TYPE,
            f"Content-Type {media_type or '(none)'} is not what {sender} sends: expected {accepted}",
            field="Content-Type",
        )
    return _parse(delivery.body, where="the body")


def json_object(delivery: Delivery, *, sender: str, form_field: str | None = None) -> dict[str, Any]:
    """:func:`json_body`, which must be a JSON object."""
    body = json_body(delivery, sender=sender, form_field=form_field)
    if not isinstance(body, dict):
        raise invalid(f"the payload must be a JSON object, not {kind_of(body)}")
    return body


def _parse(raw: bytes | str, *, where: str) -> Any:
    """One JSON document, at most one level less deep than an Event may be: mapped into an
    Event's ``data`` it gains the envelope's level, and acceptance need not walk it again."""
    try:
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8-sig")
        check_text_depth(raw, max_json_depth() - 1)
        return parse_json(raw)
    except UnicodeDecodeError as exc:
        raise invalid(f"{where} is not UTF-8 text (byte {exc.start})") from None
    except EnvelopeInvalid as exc:
        raise invalid(f"{where} cannot be read: {exc.message}") from None


def _form_field(body: bytes, name: str) -> str:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid(f"the form body is not UTF-8 text (byte {exc.start})") from None
    try:
        fields = parse_qs(text, keep_blank_values=True, strict_parsing=True, max_num_fields=100)
    except ValueError as exc:
        raise invalid(f"the form body cannot be read: {exc}") from None
    values = fields.get(name, [])
    if len(values) != 1:
        raise invalid(f"the form body must hold one field {name!r} with the JSON payload", field=name)
    return values[0]


# --- small readers of decoded JSON ---------------------------------------------------------------


def dig(value: Any, *path: str) -> Any:
    """The value at ``path`` in nested objects, or ``None``."""
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def text_at(value: Any, *path: str) -> str:
    """The string (or integer, as text) at ``path``, or ``""``."""
    found = dig(value, *path)
    if isinstance(found, bool):
        return ""
    if isinstance(found, str | int):
        return str(found)
    return ""


# --- templates ---------------------------------------------------------------------------------


def render_template(template: Template, *, data: Any, delivery: Delivery, key: str) -> str:
    """``template`` rendered over ``data`` and the delivery's headers; raises :class:`Refused`
    naming a field that is missing or not a scalar."""
    out: list[str] = []
    for part in template.parts:
        if isinstance(part, str):
            out.append(part)
            continue
        root, *rest = part
        value: Any = delivery.header(rest[0]) if root == "headers" else dig(data, *rest)
        shown = ".".join(part)
        if isinstance(value, bool):
            out.append("true" if value else "false")
        elif isinstance(value, str | int | float):
            out.append(str(value))
        else:
            what = "missing" if value is None else f"{kind_of(value)}, not a scalar"
            raise invalid(f"the receiver's {key} template {template.text} needs {shown}, which is {what}")
    return "".join(out)


def templated(
    event: dict[str, Any], settings_: Mapping[str, Any], *, delivery: Delivery, keys: tuple[str, ...]
) -> dict[str, Any]:
    """``event`` with the attributes of ``keys`` the receiver declares templates for replaced by
    their rendering over the event's data and the delivery's headers (an empty subject is
    left out)."""
    result = dict(event)
    for key in keys:
        text = settings_.get(key)
        if text is None:
            continue
        value = render_template(parse_template(text), data=event.get("data"), delivery=delivery, key=key)
        if key == "subject" and not value:
            result.pop("subject", None)
        else:
            result[key] = value
    return result


# --- the CloudEvent ----------------------------------------------------------------------------


def cloudevent(
    *,
    id: str,
    source: str,
    type: str,
    scope: str,
    data: Any,
    subject: str = "",
    time: datetime | str | None = None,
) -> dict[str, Any]:
    """A structured-mode CloudEvent with Conduit's ``scope``, as acceptance takes it (``time`` an
    aware datetime or an RFC 3339 text kept as the sender wrote it)."""
    event: dict[str, Any] = {"specversion": "1.0", "id": id, "source": source, "type": type, "scope": scope}
    if subject:
        event["subject"] = subject
    if isinstance(time, datetime):
        event["time"] = timestamp(time)
    elif time:
        event["time"] = time
    event["data"] = data
    return event
