"""``POST /hooks/<receiver name>``: a real sender's webhook (GitHub, Slack, Alertmanager, a
CloudEvents sender, any HMAC signer), received by a receiver of the live configuration.

No session, no CSRF token, no API token: the signature is the authentication, checked by the
receiver (``routing.receivers``). A ``cloudevents`` receiver also answers the CloudEvents
webhook validation handshake (``OPTIONS`` with ``WebHook-Request-Origin``). The answers are what senders expect: 201 with the Events a
delivery was accepted as, 200 for a redelivery (the duplicate it is) or a handshake (a GitHub
ping, Slack's challenge), 401 for a missing or wrong signature or a stale timestamp, 503 when the
receiver's secret cannot be read here; nothing is stored with a 4xx or 5xx.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse

from causal.clock import Clock, system_clock
from conduit_site.api.auth import ApiError, api_view, json_error, request_bytes
from conduit_site.api.events import webhook_validation
from routing.acceptance.envelopes import EnvelopeInvalid
from routing.receivers import cloudevents, services
from routing.receivers.kinds import KINDS
from routing.receivers.selectors import ReceiverNotFound, receiver_find
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


# What a cloudevents receiver's URL answers; other kinds take POST alone.
CLOUDEVENTS_ALLOWED_METHODS = "POST, OPTIONS"


# No token: the receiver checks the delivery's signature. The API's front door answers a method
# other than POST and OPTIONS (405), a body too large to read (413), an unknown receiver (404),
# and more deliveries to one receiver than CONDUIT_ACCEPT_RATE_PER_MINUTE (429).
@api_view(
    ["POST", "OPTIONS"], public=True, accept_methods=["POST"], errors={ReceiverNotFound: (404, "not_found")}
)
def receive(request: HttpRequest, name: str) -> HttpResponse:
    """Receive one delivery for receiver ``name`` (see the module's documentation); ``OPTIONS``:
    the CloudEvents webhook validation handshake, for a ``cloudevents`` receiver."""
    if request.method == "OPTIONS":
        return handshake(request, name)
    delivery = Delivery.of(request_bytes(request), request.headers.items())
    try:
        result = services.delivery_accept(name=name, delivery=delivery, clock=clock)
    except Refused as exc:
        headers = {"WWW-Authenticate": exc.challenge} if exc.challenge else {}
        raise ApiError.answering(
            exc, status=REFUSAL_STATUS[exc.refusal], headers=headers, receiver=name
        ) from exc
    except EnvelopeInvalid as exc:
        # Acceptance refused an Event: the status the API gives the same refusal.
        raise ApiError.answering(exc, receiver=name) from exc
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


def handshake(request: HttpRequest, name: str) -> HttpResponse:
    """The CloudEvents webhook validation handshake (``OPTIONS`` with
    ``WebHook-Request-Origin``) for a ``cloudevents`` receiver: 200 with
    ``WebHook-Allowed-Origin`` and ``WebHook-Allowed-Rate``, reading and storing nothing. The
    other kinds' senders shake hands otherwise (GitHub's ping, Slack's challenge, by POST): 405."""
    spec = receiver_find(name)
    if KINDS.get(spec.kind) is not cloudevents.KIND:
        response = json_error(
            405,
            "method_not_allowed",
            f"OPTIONS is not allowed here: the {spec.kind} receiver {name!r} takes POST only",
        )
        response["Allow"] = "POST"
        return response
    return webhook_validation(request, allow=CLOUDEVENTS_ALLOWED_METHODS)
