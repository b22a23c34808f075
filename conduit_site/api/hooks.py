"""``POST /hooks/<receiver name>``: a real sender's webhook (GitHub, Slack, Alertmanager, a
CloudEvents sender, any HMAC signer), received by a receiver of the live configuration.

No session, no CSRF token, no API token: the signature is the authentication, checked by the
receiver (``routing.receivers``). The answers are what senders expect: 201 with the Events a
delivery was accepted as, 200 for a redelivery (the duplicate it is) or a handshake (a GitHub
ping, Slack's challenge), 401 for a missing or wrong signature or a stale timestamp, 503 when the
receiver's secret cannot be read here; nothing is stored with a 4xx or 5xx.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from causal.clock import Clock, system_clock
from routing.acceptance.envelopes import EnvelopeInvalid, EventConflict, EventTooLarge
from routing.receivers import services
from routing.receivers.selectors import ReceiverNotFound
from routing.receivers.verify import Delivery, Refusal, Refused

# The trusted clock of the replay window (tests inject a fake one).
clock: Clock = system_clock

REFUSAL_STATUS = {
    Refusal.SIGNATURE_MISSING: 401,
    Refusal.SIGNATURE_INVALID: 401,
    Refusal.TIMESTAMP_STALE: 401,
    Refusal.SECRET_UNAVAILABLE: 503,
    Refusal.EVENT_TOO_LARGE: 413,
    Refusal.UNSUPPORTED_MEDIA_TYPE: 415,
    Refusal.INVALID_PAYLOAD: 400,
    Refusal.INVALID_EVENT: 400,
    Refusal.CONFLICTING_DUPLICATE: 409,
}


def _error(status: int, body: dict[str, Any], **headers: str) -> JsonResponse:
    response = JsonResponse(body, status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


@csrf_exempt
def receive(request: HttpRequest, name: str) -> JsonResponse:
    """Receive one delivery for receiver ``name`` (see the module's documentation)."""
    if request.method != "POST":
        return _error(
            405,
            {"error": "method_not_allowed", "message": f"{request.method} is not allowed here; use POST"},
            Allow="POST",
        )
    try:
        body = request.body
    except RequestDataTooBig:
        return _error(
            413,
            {
                "error": "event_too_large",
                "message": "the request body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE "
                f"({settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes)",
            },
        )
    delivery = Delivery.of(body, request.headers.items())
    try:
        result = services.delivery_accept(name=name, delivery=delivery, clock=clock)
    except ReceiverNotFound as exc:
        return _error(404, {"error": "not_found", "message": str(exc)})
    except Refused as exc:
        headers = {"WWW_Authenticate": exc.challenge} if exc.challenge else {}
        return _error(REFUSAL_STATUS[exc.refusal], {**exc.details(), "receiver": name}, **headers)
    except EnvelopeInvalid as exc:
        if isinstance(exc, EventTooLarge):
            status = 413
        elif isinstance(exc, EventConflict) or getattr(exc, "code", "") == "conflicting_duplicate":
            status = 409
        else:
            status = 400
        return _error(status, {**exc.details(), "receiver": name})
    if result.reply is not None:
        return JsonResponse(result.reply)
    response = JsonResponse(
        {
            "receiver": result.receiver,
            "status": "accepted" if result.created else "duplicate",
            "events": [
                {
                    "seq": item.event.seq,
                    "id": item.event.envelope_id,
                    "source": item.event.source,
                    "type": item.event.type,
                    "subject": item.event.subject,
                    "created": item.created,
                }
                for item in result.received
            ],
        },
        status=201 if result.created else 200,
    )
    if len(result.received) == 1:
        response["Location"] = reverse("api-event-detail", args=[result.received[0].event.seq])
    return response
