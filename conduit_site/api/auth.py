"""The JSON API's front door: token authentication, allowed methods and error mapping.

Write every endpoint of ``/api`` with :func:`api_view`::

    @api_view(["POST"], permission="routing.skip_event", errors={controls.ControlRefused: (409, "wrong_state")})
    def event_skip(request: HttpRequest, seq: int) -> JsonResponse:
        result = controls.event_skip(seq=seq, user=request.user, clock=clock)
        return JsonResponse(result.as_dict())

(the skip endpoint of ``conduit_site/api/controls.py``, written out; a view that reads a body
calls :func:`request_json`), then add the route to ``conduit_site/api/urls.py`` and describe it in
its resource's module of ``conduit_site/api/openapi/`` (a test walks the URLconf and fails for
any route or method the schema lacks). The receivers' webhooks (``conduit_site/api/hooks.py``,
outside ``/api``) go through the same decorator with ``public=True``: the receiver checks the
signature.

What the decorator does, in order:

1. authenticates ``Authorization: Bearer <token>`` (a per-user :class:`~routing.models.ApiToken`):
   a missing, malformed, unknown or revoked token, or one of an inactive user, gets
   ``401`` with a JSON error and ``WWW-Authenticate: Bearer``; then ``request.user`` is the
   token's user and ``request.api_token`` the token. ``public=True`` skips this (the schema),
   and so does a method of ``public_methods`` (``OPTIONS`` of the CloudEvents webhook handshake);
2. counts the request against the API's rate limits (``conduit_site.api.ratelimit``): per
   token and per login (``CONDUIT_API_RATE_PER_MINUTE``, ``CONDUIT_API_LOGIN_RATE_PER_MINUTE``),
   or, for a method of ``accept_methods`` (acceptance from senders), per token or, public, per
   path (a receiver) with ``CONDUIT_ACCEPT_RATE_PER_MINUTE``; past one, ``429`` with
   ``Retry-After``;
3. refuses a method not in ``methods`` with ``405`` and an ``Allow`` header;
4. refuses (``403``) a token without the ``permission`` of the method (one for all methods, or
   one per method): the token's user must have it and a narrowed token's scopes must allow it
   (``routing.access.roles``). Every endpoint but a public one names its permissions;
5. calls the view and maps the domain errors it raises to JSON ``4xx`` responses: an
   :class:`ApiError` as it says; exceptions listed in ``errors=`` or registered with
   :func:`register_api_error`, most specific class first; ``ObjectDoesNotExist``/``Http404`` →
   404; ``PermissionDenied`` → 403. An exception with a ``details()`` method (like
   :class:`~routing.acceptance.envelopes.EnvelopeInvalid`) supplies the JSON body itself (``error``,
   ``field``, ``message``…); others give ``{"error": code, "message": str(exc)}``. A view that
   adds to that body or answers another status raises :meth:`ApiError.answering`.
   Anything else is a bug and propagates (500).

The API is CSRF-exempt: it authenticates with a header a browser never adds by itself, not
with cookies. Responses carry ``Cache-Control: no-store``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from causal.clock import system_clock
from conduit_site.api.ratelimit import Limit, rate_count
from routing.acceptance.envelopes import (
    BatchConflict,
    EnvelopeInvalid,
    EventConflict,
    EventTooLarge,
    parse_json,
)
from routing.acceptance.services import WorkAddressRefused
from routing.access.roles import token_allows
from routing.access.services import ApiTokenInvalid, api_token_authenticate

ErrorMapping = Mapping[type[BaseException], tuple[int, str]]
View = Callable[..., HttpResponse]

REALM = "conduit"
JSON_CONTENT_TYPES = frozenset(
    {"application/json", "application/cloudevents+json", "application/cloudevents-batch+json"}
)


class ApiError(Exception):
    """Raise from a view to answer with a JSON error: ``{"error": code, "message": …, **extra}``,
    with ``headers`` on the response."""

    def __init__(
        self, status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra
        self.headers = dict(headers or {})
        self._body: dict[str, Any] | None = None

    @classmethod
    def answering(
        cls,
        exc: BaseException,
        *,
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> ApiError:
        """``exc``, a domain error, as the API answers it, its JSON body completed with
        ``extra``: with the status and code the API's error mapping gives its class, or with
        ``status`` and the code its own ``details()`` name."""
        if status is None:
            status, code = _mapped(exc, _ERRORS)
        else:
            code = ""
        body = {**_error_body(exc, code), **extra}
        error = cls(status, body["error"], body.get("message", ""), headers=headers)
        error._body = body
        return error

    def details(self) -> dict[str, Any]:
        """The JSON body of the error."""
        if self._body is not None:
            return dict(self._body)
        return {"error": self.code, "message": self.message, **self.extra}


# Domain errors every endpoint maps; most specific class wins (looked up along the MRO).
_ERRORS: dict[type[BaseException], tuple[int, str]] = {
    EventTooLarge: (413, "event_too_large"),
    # An Event naming its own targets (a Work, keys) from a sender that may not send input.
    WorkAddressRefused: (403, "forbidden"),
    EventConflict: (409, "conflicting_duplicate"),
    BatchConflict: (409, "conflicting_duplicate"),
    EnvelopeInvalid: (400, "invalid_event"),
    ApiTokenInvalid: (400, "invalid_token_request"),
    ObjectDoesNotExist: (404, "not_found"),
    Http404: (404, "not_found"),
    PermissionDenied: (403, "forbidden"),
}


def register_api_error(exc_type: type[BaseException], status: int, code: str) -> None:
    """Map a domain exception to a JSON error for every endpoint (``status`` must be 4xx)."""
    if not 400 <= status < 500:
        raise ValueError(f"a domain error maps to a 4xx status, not {status}")
    _ERRORS[exc_type] = (status, code)


def json_error(status: int, code: str, message: str, **extra: Any) -> JsonResponse:
    """A JSON error response: ``{"error": code, "message": message, **extra}``."""
    return JsonResponse({"error": code, "message": message, **extra}, status=status)


def _unauthorized(message: str, *, invalid: bool) -> JsonResponse:
    response = json_error(401, "unauthorized", message)
    challenge = f'Bearer realm="{REALM}"'
    if invalid:
        challenge += ', error="invalid_token"'
    response["WWW-Authenticate"] = challenge
    return response


def _authenticate(request: HttpRequest) -> JsonResponse | None:
    """Set ``request.user``/``request.api_token`` from the bearer token, or answer 401."""
    header = request.headers.get("Authorization", "")
    if not header:
        return _unauthorized(
            "an API token is required: send the header 'Authorization: Bearer <token>'", invalid=False
        )
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return _unauthorized("the Authorization header must read 'Bearer <token>'", invalid=True)
    token = api_token_authenticate(secret=secret.strip(), clock=system_clock)
    if token is None:
        return _unauthorized("the API token is unknown, revoked or of an inactive user", invalid=True)
    request.user = token.user
    request.api_token = token
    return None


def _rate_limited(request: HttpRequest, *, accepting: bool) -> JsonResponse | None:
    """Count the request against its rate limits; 429 with ``Retry-After`` past one."""
    token = getattr(request, "api_token", None)
    if accepting:
        key = f"accept:token:{token.pk}" if token is not None else f"accept:path:{request.path}"
        what = f"API token {token.prefix}" if token is not None else f"{request.path}"
        limits = [Limit(key, settings.CONDUIT_ACCEPT_RATE_PER_MINUTE, what)]
    elif token is not None:
        limits = [
            Limit(f"api:token:{token.pk}", settings.CONDUIT_API_RATE_PER_MINUTE, f"API token {token.prefix}"),
            Limit(
                f"api:login:{token.user_id}",
                settings.CONDUIT_API_LOGIN_RATE_PER_MINUTE,
                f"user {request.user.get_username()!r} (all its tokens)",
            ),
        ]
    else:
        return None
    exceeded = rate_count(limits)
    if exceeded is None:
        return None
    response = json_error(429, "rate_limited", exceeded.message, retry_after=exceeded.retry_after)
    response["Retry-After"] = str(exceeded.retry_after)
    return response


def api_permitted(request: HttpRequest, permission: str) -> bool:
    """Whether the request's token may use ``permission``: its user has it and, for a narrowed
    token, one of its scopes allows it."""
    token = getattr(request, "api_token", None)
    return request.user.has_perm(permission) and token_allows(getattr(token, "scopes", None), permission)


def api_require(request: HttpRequest, permission: str, *, to: str) -> None:
    """Refuse (403) a token that may not use ``permission``; ``to`` says what it is needed for."""
    if api_permitted(request, permission):
        return
    token = getattr(request, "api_token", None)
    if request.user.has_perm(permission) and token is not None:
        message = (
            f"API token {token.prefix} is narrowed to {', '.join(token.scopes)}: it may not use "
            f"{permission}, needed to {to}"
        )
    else:
        message = f"user {request.user.get_username()!r} lacks the permission {permission} needed to {to}"
    raise ApiError(403, "forbidden", message, permission=permission)


def _mapped(exc: BaseException, mapping: ErrorMapping) -> tuple[int, str]:
    """The ``(status, code)`` of the most specific class of ``exc`` in ``mapping``."""
    return next(mapping[cls] for cls in type(exc).__mro__ if cls in mapping)


def _error_body(exc: BaseException, code: str) -> dict[str, Any]:
    details = getattr(exc, "details", None)
    body = details() if callable(details) else {"error": code, "message": str(exc) or code}
    body.setdefault("error", code)
    return body


def _error_response(exc: BaseException, mapping: ErrorMapping) -> JsonResponse:
    if isinstance(exc, ApiError):
        response = JsonResponse(exc.details(), status=exc.status)
        for name, value in exc.headers.items():
            response[name] = value
        return response
    status, code = _mapped(exc, mapping)
    return JsonResponse(_error_body(exc, code), status=status)


def api_view(
    methods: Iterable[str],
    *,
    permission: str | Mapping[str, str] | None = None,
    public: bool = False,
    public_methods: Iterable[str] = (),
    accept_methods: Iterable[str] = (),
    errors: ErrorMapping | None = None,
) -> Callable[[View], View]:
    """Make a function a JSON API endpoint: token authentication, ``methods`` only (405
    otherwise), the ``permission`` of the method (403 otherwise) and domain errors mapped to
    JSON 4xx (see the module documentation).

    ``permission`` is one permission for every method or a mapping of method to permission;
    required unless ``public=True``, which serves without a token (only for documents like
    the schema). ``public_methods`` are served without a token and need no permission (a
    handshake that reads and stores nothing). ``errors`` maps further exception classes to
    ``(status, code)`` for this view. ``accept_methods`` accept Events from senders: they count
    against the acceptance rate limit instead of the API's.
    """
    allowed = tuple(method.upper() for method in methods)
    if not allowed:
        raise ValueError("api_view needs at least one method")
    open_methods = frozenset(method.upper() for method in public_methods)
    if not open_methods <= set(allowed):
        raise ValueError("api_view's public_methods must be among its methods")
    guarded = tuple(method for method in allowed if method not in open_methods)
    accepting = frozenset(method.upper() for method in accept_methods)
    if isinstance(permission, str):
        permissions = dict.fromkeys(guarded, permission)
    else:
        permissions = {method.upper(): name for method, name in (permission or {}).items()}
    if not public and set(permissions) != set(guarded):
        raise ValueError(f"api_view needs a permission for each of {', '.join(guarded)}")

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            open_method = public or request.method in open_methods
            response = None if open_method else _authenticate(request)
            if response is None and (not open_method or request.method in accepting):
                response = _rate_limited(request, accepting=request.method in accepting)
            if response is None and request.method not in allowed:
                response = json_error(
                    405,
                    "method_not_allowed",
                    f"{request.method} is not allowed here; use {', '.join(allowed)}",
                )
                response["Allow"] = ", ".join(allowed)
            if response is None:
                mapping = {**_ERRORS, **(errors or {})}
                try:
                    if not open_method:
                        api_require(
                            request, permissions[request.method], to=f"{request.method} {request.path}"
                        )
                    if "" in request.GET:
                        # ``?=x``: no parameter has an empty name; silently ignoring it would
                        # answer a request the document does not describe.
                        raise ApiError(
                            400, "invalid_request", "a query parameter has no name (?=…)", field=""
                        )
                    response = view(request, *args, **kwargs)
                except (ApiError, *mapping) as exc:
                    response = _error_response(exc, mapping)
            response["Cache-Control"] = "no-store"
            return response

        wrapper.api_methods = allowed  # type: ignore[attr-defined]
        wrapper.api_permissions = permissions  # type: ignore[attr-defined]
        wrapper.api_public = public  # type: ignore[attr-defined]
        wrapper.api_public_methods = tuple(sorted(open_methods))  # type: ignore[attr-defined]
        return csrf_exempt(wrapper)

    return decorator


def request_json(request: HttpRequest, *, max_bytes: int | None = None, allow_empty: bool = False) -> Any:
    """The request's JSON body, after checking its media type and its size.

    The size (``max_bytes``, by default ``CONDUIT_MAX_EVENT_BYTES``) is checked on the raw body
    before parsing: 413 (:func:`request_body`). A media type other than JSON (``application/json``,
    ``application/cloudevents+json``, ``application/cloudevents-batch+json`` or any
    ``+json`` type): 415. Invalid JSON: 400 (:class:`~routing.acceptance.envelopes.EnvelopeInvalid`). An
    empty body is ``None`` when ``allow_empty``, else 400.
    """
    body = request_body(request, max_bytes=max_bytes)
    if not body.strip():
        if allow_empty:
            return None
        raise ApiError(400, "invalid_event", "the request body is empty: send a JSON document", field=None)
    media_type = (request.content_type or "").lower()
    if not is_json_media_type(media_type):
        raise ApiError(
            415,
            "unsupported_media_type",
            f"Content-Type {media_type or '(none)'!s} is not accepted: send application/json or "
            "application/cloudevents+json (structured mode)",
        )
    return parse_json(body)


def is_json_media_type(media_type: str) -> bool:
    """Whether ``media_type`` (lower-case, no parameters) is JSON: one of
    ``JSON_CONTENT_TYPES`` or any ``+json`` type."""
    return media_type in JSON_CONTENT_TYPES or media_type.endswith("+json")


def request_body(request: HttpRequest, *, max_bytes: int | None = None) -> bytes:
    """The request's raw body, at most ``max_bytes`` (by default ``CONDUIT_MAX_EVENT_BYTES``)
    long: 413 otherwise, before it is read when the declared length says so."""
    limit = settings.CONDUIT_MAX_EVENT_BYTES if max_bytes is None else max_bytes
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "event_too_large", _too_large(int(declared), limit), field=None)
    body = request_bytes(request, field=None)
    if len(body) > limit:
        raise ApiError(413, "event_too_large", _too_large(len(body), limit), field=None)
    return body


def request_bytes(request: HttpRequest, **extra: Any) -> bytes:
    """The request's raw body, or 413 when it is larger than Django reads
    (``DATA_UPLOAD_MAX_MEMORY_SIZE``); ``extra`` completes the error's JSON body."""
    try:
        return request.body
    except RequestDataTooBig as exc:
        raise ApiError(
            413,
            "event_too_large",
            "the request body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE "
            f"({settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes)",
            **extra,
        ) from exc


def _too_large(size: int, limit: int) -> str:
    return f"the request body is {size} bytes; the limit is {limit} bytes (CONDUIT_MAX_EVENT_BYTES)"


_WHOLE_QUERY = re.compile(r"([0-9]{1,19})(?:\.0+)?")


def query_whole(raw: str, *, minimum: int, maximum: int) -> int | None:
    """A query parameter a whole number from ``minimum`` to ``maximum`` (``7`` or ``7.0``: the
    document's integers are JSON's numbers, which a client may write either way), ``None`` when
    absent or empty, else ``ValueError`` saying what was expected."""
    if raw == "":
        return None
    found = _WHOLE_QUERY.fullmatch(raw) if raw.isascii() else None
    if found is None or not minimum <= int(found[1]) <= maximum:
        raise ValueError(f"expected an integer {minimum} to {maximum}, got {raw[:40]!r}")
    return int(found[1])
