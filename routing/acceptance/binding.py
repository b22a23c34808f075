"""The CloudEvents HTTP binding (1.0): which content mode a request uses, and a binary-mode
message turned into the structured-mode Event it stands for.

Pure functions: no Django request, no database. The caller gives the media type, the headers
and the raw body; what comes out goes through the same checks as a structured-mode Event
(:func:`routing.acceptance.envelopes.parse_envelope`, the size and depth limits), so every
mode is refused and accepted alike.

- **structured**: ``Content-Type: application/cloudevents+json``, the Event in the body;
- **batch**: ``Content-Type: application/cloudevents-batch+json``, a JSON array of Events;
- **binary**: any other media type with ``ce-*`` headers: each attribute in a ``ce-<name>``
  header (percent-encoded where needed), the ``Content-Type`` the Event's ``datacontenttype``,
  the body the data as is: JSON media types are parsed as JSON, other data is kept as text
  when it is UTF-8 without NUL characters, else as base64 (``data_base64``).

Conduit's own JSON (``application/json`` without ``ce-*`` headers) is structured mode: an
object is one Event, an array a batch.

The official SDK (``cloudevents``) reads the headers (the ``ce-`` prefix, percent-decoding,
``Content-Type`` as ``datacontenttype``); the data and ``time`` are read here, strictly: the
SDK takes malformed JSON for text, reads JSON without a depth limit or a check for keys given
twice, and accepts times RFC 3339 does not.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from enum import StrEnum
from typing import Any
from urllib.parse import unquote

from cloudevents.core.bindings.http import CE_PREFIX, HTTPMessage, from_binary
from cloudevents.core.formats.json import JSONFormat

from routing.acceptance.envelopes import EnvelopeInvalid, check_text_depth, max_json_depth, parse_json

STRUCTURED_MEDIA_TYPE = "application/cloudevents"
BATCH_MEDIA_TYPE = "application/cloudevents-batch"
# Attributes a binary-mode message may not carry as ce-* headers: the body is the data and
# Content-Type its type (the HTTP binding, section 3.1.3).
NOT_HEADERS = {
    "data": "in binary mode the data is the request body, not a ce-data header",
    "data-base64": "in binary mode the data is the request body, not a ce-data_base64 header",
    "datacontenttype": "in binary mode the data's type is the Content-Type header, not ce-datacontenttype",
}


class Mode(StrEnum):
    """A CloudEvents HTTP content mode."""

    # One Event in the body (application/cloudevents+json, or Conduit's application/json).
    STRUCTURED = "structured"
    # A JSON array of structured-mode Events (application/cloudevents-batch+json).
    BATCH = "batch"
    # Attributes in ce-* headers, the data in the body.
    BINARY = "binary"


def content_mode(media_type: str, header_names: Any) -> Mode:
    """The content mode of a request with ``media_type`` (no parameters) and headers named
    ``header_names``: the media type decides first, as the binding says; ``ce-*`` headers
    then make binary mode."""
    media = media_type.lower()
    if media.startswith(BATCH_MEDIA_TYPE):
        return Mode.BATCH
    if media.startswith(STRUCTURED_MEDIA_TYPE):
        return Mode.STRUCTURED
    if any(name.lower().startswith(CE_PREFIX) for name in header_names):
        return Mode.BINARY
    return Mode.STRUCTURED


def binary_event(headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """The structured-mode Event a binary-mode message stands for: attributes from the
    ``ce-*`` headers, ``datacontenttype`` from ``Content-Type``, and the body as ``data``
    (parsed JSON, or text) or ``data_base64`` (bytes that are not UTF-8 text).

    Its depth is checked: JSON data nests at most ``CONDUIT_MAX_JSON_DEPTH`` - 1 levels, as
    the data of a structured Event does inside it, so the Event may be given to
    :func:`~routing.acceptance.envelopes.parse_envelope` with ``depth_checked=True``. Raises
    :class:`~routing.acceptance.envelopes.EnvelopeInvalid` for a header that may not be one and
    for data its JSON media type does not parse as; everything else is checked by
    :func:`~routing.acceptance.envelopes.parse_envelope`, as for any Event.
    """
    wanted: dict[str, str] = {}
    time: str | None = None
    for name, value in headers.items():
        lower = name.lower()
        if lower == "content-type":
            wanted[lower] = value
        elif lower.startswith(CE_PREFIX):
            attribute = lower[len(CE_PREFIX) :]
            if attribute in NOT_HEADERS:
                raise EnvelopeInvalid(attribute.replace("-", "_"), NOT_HEADERS[attribute])
            if attribute == "time":
                # Read here, not by the SDK: RFC 3339 is checked as in structured mode.
                time = unquote(value)
            else:
                wanted[lower] = value
    event = from_binary(HTTPMessage(headers=wanted, body=body), _FORMAT, _structured)
    if time is not None:
        event["time"] = time
    return event  # type: ignore[return-value]


class _ConduitData(JSONFormat):
    """The SDK's JSON event format, reading binary-mode data Conduit's way."""

    def read_data(self, body: bytes, datacontenttype: str | None) -> Any:
        if not body:
            return None
        if datacontenttype is None or self.JSON_CONTENT_TYPE_PATTERN.match(datacontenttype):
            return _json_data(body)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return body
        # NUL cannot be stored as text (PostgreSQL): such data is kept as the bytes it is.
        return body if "\x00" in text else text


_FORMAT = _ConduitData()


def _json_data(body: bytes) -> Any:
    """The body as JSON data: read as any JSON is (UTF-8, no NaN, no key twice), and one level
    less deep than the limit, the Event being the first level."""
    limit = max_json_depth()
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise EnvelopeInvalid("data", f"the body is not UTF-8 text (byte {exc.start})") from exc
    try:
        check_text_depth(text, limit - 1)
    except EnvelopeInvalid:
        raise EnvelopeInvalid(
            "data",
            f"the data nests arrays and objects more than {limit - 1} levels deep: inside its Event, "
            f"more than {limit} (CONDUIT_MAX_JSON_DEPTH)",
        ) from None
    try:
        return parse_json(text)
    except EnvelopeInvalid as exc:
        raise EnvelopeInvalid(
            "data", f"the body is not the JSON its Content-Type says: {exc.message}"
        ) from exc


def _structured(attributes: dict[str, Any], data: Any) -> dict[str, Any]:
    """The SDK's event factory: the attributes it read, with the data under ``data`` or, for
    bytes, ``data_base64`` (a plain dict: :func:`parse_envelope` validates it)."""
    event = dict(attributes)
    if isinstance(data, bytes):
        event["data_base64"] = base64.b64encode(data).decode("ascii")
    elif data is not None:
        event["data"] = data
    return event
