"""Any sender that signs the body with an HMAC in a header (``kind: generic-hmac``): Gitea,
Sentry, Linear, Shopify and many more.

The declaration names the header (``header``, default ``X-Signature``), the hash
(``algorithm``: sha1, sha256 (default) or sha512), how the digest is written (``encoding``: hex
(default) or base64) and what precedes it (``prefix``, e.g. ``sha256=``). The body is JSON.

The CloudEvent: ``id`` from the ``id`` template (e.g. ``"{headers.x-gitea-delivery}"``), by
default the SHA-256 of the body (the same body is the same Event); ``type`` from the ``type``
template, by default ``hook.<receiver name>``; ``source`` from the ``source`` template, by
default ``/hooks/<receiver name>``; ``subject`` from the ``subject`` template (none by
default); ``data`` the payload.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from routing.config.receivers import DECLARED_KINDS, HOOKS_PATH, ReceiverSpec
from routing.config.receivers import DEFAULT_HMAC_HEADER as DEFAULT_HEADER
from routing.receivers.mapping import Mapped, cloudevent, json_body, templated
from routing.receivers.spec import Kind
from routing.receivers.verify import Delivery, check_hmac


def verify(
    spec: ReceiverSpec, delivery: Delivery, secret: bytes, *, now: datetime, replay_window: bool = True
) -> tuple[str, ...]:
    """Check the declared header's HMAC of the raw body."""
    settings = spec.settings
    check_hmac(
        delivery,
        secret,
        header=settings.get("header", DEFAULT_HEADER),
        algorithm=settings.get("algorithm", "sha256"),
        encoding=settings.get("encoding", "hex"),
        prefix=settings.get("prefix", ""),
    )
    return ()


def map_delivery(spec: ReceiverSpec, delivery: Delivery) -> Mapped:
    """The payload as one CloudEvent, its attributes from the declared templates."""
    payload = json_body(delivery, sender=f"receiver {spec.name}'s sender")
    mapped = cloudevent(
        id="sha256:" + hashlib.sha256(delivery.body).hexdigest(),
        source=f"{HOOKS_PATH}{spec.name}",
        type=f"hook.{spec.name}",
        scope=spec.scope,
        data=payload,
    )
    return Mapped(events=(templated(mapped, spec.settings, delivery=delivery, keys=KIND.templates),))


KIND = Kind(
    declared=DECLARED_KINDS["generic-hmac"],
    summary="any sender signing the body with an HMAC in a header (header, algorithm, encoding, prefix)",
    verify=verify,
    map=map_delivery,
)
