"""The Slack Events API (``kind: slack``).

Slack signs each request with the app's signing secret: ``X-Slack-Signature: v0=<hex>``, the
HMAC-SHA256 of ``v0:<X-Slack-Request-Timestamp>:<raw body>``. A timestamp more than five minutes
from now is refused (a replayed request). The ``url_verification`` request Slack sends when the
Request URL is entered is answered with its challenge; an ``event_callback`` is one Event; a
retry (``X-Slack-Retry-Num``) carries the same ``event_id`` and is the duplicate it is.

The CloudEvent: ``id`` the ``event_id``; ``type`` ``slack.<event.type>`` (``slack.message``,
``slack.app_mention``…); ``source`` ``slack.com/<team_id>``; ``subject``
``<channel>/<thread_ts or ts>`` (a thread: a reply and its parent share it); ``time`` the
``event_time``; ``data`` the payload as sent without its deprecated verification ``token``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from routing.config.receivers import DECLARED_KINDS, ReceiverSpec
from routing.receivers.mapping import Mapped, cloudevent, invalid, json_object, templated, text_at
from routing.receivers.spec import Kind
from routing.receivers.verify import Delivery, Refusal, Refused, check_hmac

SIGNATURE_HEADER = "X-Slack-Signature"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
REPLAY_WINDOW_SECONDS = 5 * 60
# Never stored: the legacy verification token is a credential of the app.
DROPPED_FIELDS = ("token",)


def verify(
    spec: ReceiverSpec, delivery: Delivery, secret: bytes, *, now: datetime, replay_window: bool = True
) -> tuple[str, ...]:
    """Check the timestamp's age, then ``X-Slack-Signature`` over ``v0:<timestamp>:<body>``."""
    sent = (delivery.header(TIMESTAMP_HEADER) or "").strip()
    if not sent:
        raise Refused(
            Refusal.SIGNATURE_MISSING, f"the {TIMESTAMP_HEADER} header is missing", field=TIMESTAMP_HEADER
        )
    if not sent.isascii() or not sent.isdigit() or len(sent) > 12:
        raise Refused(
            Refusal.SIGNATURE_INVALID,
            f"the {TIMESTAMP_HEADER} header is not a time in Unix seconds",
            field=TIMESTAMP_HEADER,
        )
    age = int(now.timestamp()) - int(sent)
    notes: tuple[str, ...] = ()
    if abs(age) > REPLAY_WINDOW_SECONDS:
        message = (
            f"the request was signed {_span(age)} {'ago' if age > 0 else 'ahead'}, outside Slack's "
            f"{REPLAY_WINDOW_SECONDS // 60}-minute replay window"
        )
        if replay_window:
            raise Refused(
                Refusal.TIMESTAMP_STALE, f"{message} (or this server's clock is off)", field=TIMESTAMP_HEADER
            )
        notes = (f"{message}: a live delivery this old would be refused",)
    check_hmac(
        delivery,
        secret,
        header=SIGNATURE_HEADER,
        prefix="v0=",
        message=b"v0:" + sent.encode("ascii") + b":" + delivery.body,
        how="Slack signs every request: check that the Request URL is this receiver's",
    )
    return notes


def _span(seconds: int) -> str:
    seconds = abs(seconds)
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def map_delivery(spec: ReceiverSpec, delivery: Delivery) -> Mapped:
    """An ``event_callback`` as one CloudEvent; the answer to ``url_verification``."""
    payload = json_object(delivery, sender="Slack")
    kind = payload.get("type")
    if kind == "url_verification":
        challenge = payload.get("challenge")
        if not isinstance(challenge, str) or not challenge:
            raise invalid("a url_verification request must carry its challenge (a string)", field="challenge")
        return Mapped(reply={"challenge": challenge})
    if kind == "app_rate_limited":
        return Mapped(
            reply={"status": "noted", "receiver": spec.name, "message": "Slack rate-limited the app"}
        )
    if kind != "event_callback":
        raise invalid(
            f"unknown Slack payload type {kind!r}: expected event_callback or url_verification", field="type"
        )
    event_id = payload.get("event_id")
    if not isinstance(event_id, str) or not event_id:
        raise invalid("an event_callback must carry its event_id (a string)", field="event_id")
    inner = payload.get("event")
    inner_type = inner.get("type") if isinstance(inner, dict) else None
    if not isinstance(inner_type, str) or not inner_type:
        raise invalid("an event_callback must carry its event with a type", field="event.type")
    team = text_at(payload, "team_id")
    mapped = cloudevent(
        id=event_id,
        source=f"slack.com/{team}" if team else "slack.com",
        type=f"slack.{inner_type}",
        subject=subject_of(inner),
        time=_event_time(payload.get("event_time")),
        scope=spec.scope,
        data={key: value for key, value in payload.items() if key not in DROPPED_FIELDS},
    )
    return Mapped(events=(templated(mapped, spec.settings, delivery=delivery, keys=KIND.templates),))


def subject_of(event: dict[str, Any]) -> str:
    """``<channel>/<thread_ts or ts>``: the thread a message belongs to; ``""`` without a channel."""
    channel = text_at(event, "channel")
    thread = text_at(event, "thread_ts") or text_at(event, "ts") or text_at(event, "event_ts")
    if not channel:
        return ""
    return f"{channel}/{thread}" if thread else channel


def _event_time(value: Any) -> datetime | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**33:
        return None
    return datetime.fromtimestamp(value, UTC)


KIND = Kind(
    declared=DECLARED_KINDS["slack"],
    summary="Slack Events API: X-Slack-Signature (v0) with a 5-minute replay window; url_verification answered",
    verify=verify,
    map=map_delivery,
)
