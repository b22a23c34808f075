"""Writes of the routing app: each a function with keyword-only arguments and one transaction."""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Max

from causal.clock import Clock
from causal.models import Event
from causal.services import (
    Accepted,
    Envelope,
    envelope_digest,
    event_accept_in_tx,
    event_envelope,
    events_accept_in_tx,
)
from routing.acceptance.envelopes import (
    BatchConflict,
    BatchInvalid,
    EnvelopeInvalid,
    EventConflict,
    check_size,
    encoded_size,
    parse_envelope,
    parse_envelopes,
)
from routing.access.roles import TOKEN_SCOPES
from routing.access.tokens import token_digest, token_generate, token_well_formed
from routing.config.document import ParsedDocument
from routing.config.selectors import live_generation
from routing.config.validate import parse_document
from routing.models import ApiToken, Binding, Generation, GenerationKind, Route, Scope

# --- acceptance -----------------------------------------------------------------------------


def event_accept(
    *, payload: Any, clock: Clock, accepted_by: str = "", trusted: bool = False, depth_checked: bool = False
) -> Accepted:
    """Validate one offered Event (a decoded structured-mode CloudEvent) and accept it.

    The durable commit is the acknowledgement. The same ``(source, id)`` accepted before with
    the same body returns that Event with ``created=False`` and stores nothing; with another
    body it raises :class:`~routing.acceptance.envelopes.EventConflict` (both digests). Raises
    :class:`~routing.acceptance.envelopes.EnvelopeInvalid` naming the field at fault (nothing stored):
    a malformed envelope, a reserved ``core`` type or source unless ``trusted``, an Event
    larger than ``CONDUIT_MAX_EVENT_BYTES``, or a scope not in the live configuration.
    ``depth_checked``: the payload was decoded from JSON text whose depth was checked
    (:func:`routing.acceptance.envelopes.parse_envelope`).
    """
    envelope = _validated(payload, trusted=trusted, depth_checked=depth_checked)
    if not connection.in_atomic_block:
        return ACCEPTANCES.accept(envelope, clock=clock, accepted_by=accepted_by)
    with transaction.atomic():
        _refuse_unknown_scopes_in_tx([envelope], batch=False)
        accepted = event_accept_in_tx(envelope=envelope, clock=clock, accepted_by=accepted_by)
        conflicts = _conflicts([envelope], [accepted])
        if conflicts:
            raise conflicts[0]
        return accepted


class _Offer:
    """One caller's Event waiting in a group commit, and what became of it."""

    __slots__ = ("accepted", "accepted_by", "done", "envelope", "error")

    def __init__(self, envelope: Envelope, accepted_by: str) -> None:
        self.envelope = envelope
        self.accepted_by = accepted_by
        self.accepted: Accepted | None = None
        self.error: BaseException | None = None
        self.done = False


class GroupCommit:
    """Acceptances of one process's concurrent callers (the web server's request threads)
    committed together: one transaction, one flush to disk, for every Event offered while
    the previous commit was being made.

    A caller offers its validated Event and waits. When no commit is in progress, the caller
    whose Event is still waiting takes every waiting Event and commits them in arrival order
    (``seq`` follows it), as one batch acceptance does: each Event keeps its own answer
    (created, duplicate, conflict, unknown scope), and every caller returns only after the
    commit that holds its Event; when the commit fails, every caller of the group raises.
    The flush dominates an acceptance (SQLite ``synchronous=FULL`` and PostgreSQL alike);
    alone, a caller forms a group of one at the cost it had before.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._waiting: list[_Offer] = []
        self._committing = False

    def accept(self, envelope: Envelope, *, clock: Clock, accepted_by: str) -> Accepted:
        offer = _Offer(envelope, accepted_by)
        group: list[_Offer] = []
        with self._changed:
            self._waiting.append(offer)
            while not offer.done and self._committing:
                self._changed.wait()
            if not offer.done:
                group, self._waiting = self._waiting, []
                self._committing = True
        if group:
            try:
                _commit_group(group, clock=clock)
            except BaseException as exc:
                for other in group:
                    other.error = exc if other is offer else _copied(exc)
                raise
            finally:
                with self._changed:
                    for other in group:
                        other.done = True
                    self._committing = False
                    self._changed.notify_all()
        if offer.error is not None:
            raise offer.error
        assert offer.accepted is not None
        return offer.accepted


def _copied(exc: BaseException) -> BaseException:
    """The same error for another thread to raise (one exception object raised in several
    threads would share, and tangle, one traceback)."""
    try:
        return copy.copy(exc).with_traceback(None)
    except Exception:  # noqa: BLE001 - an exception class that cannot be copied
        return RuntimeError(f"the group commit holding this Event failed: {exc!r}")


def _commit_group(group: list[_Offer], *, clock: Clock) -> None:
    """Accept the group's Events in one transaction, each with its own answer."""
    with transaction.atomic():
        known = live_scope_paths(sorted({offer.envelope.scope for offer in group}))
        admitted: list[_Offer] = []
        for offer in group:
            if offer.envelope.scope not in known:
                try:
                    _refuse_unknown_scopes_in_tx([offer.envelope], batch=False)
                except EnvelopeInvalid as exc:
                    offer.error = exc
                    continue
            admitted.append(offer)
        if not admitted:
            return
        envelopes = [offer.envelope for offer in admitted]
        results = events_accept_in_tx(
            envelopes=envelopes, clock=clock, accepted_by=[offer.accepted_by for offer in admitted]
        )
        conflicts = _conflicts(envelopes, results)
        for index, (offer, result) in enumerate(zip(admitted, results, strict=True)):
            if index in conflicts:
                offer.error = conflicts[index]
            else:
                offer.accepted = result


# The group commit of this process's acceptances (routing.services.event_accept).
ACCEPTANCES = GroupCommit()


def events_accept(
    *,
    payloads: Sequence[Any],
    clock: Clock,
    accepted_by: str = "",
    trusted: bool = False,
    depth_checked: bool = False,
) -> list[Accepted]:
    """Validate every Event of a batch, then accept them all in one transaction, in order.

    All or nothing: when any Event is refused, :class:`~routing.acceptance.envelopes.BatchInvalid` lists
    every refusal (each with its ``index``) and nothing is stored. Duplicates (of earlier
    Events or of an earlier Event in the same batch) come back with ``created=False``; one
    with another body than the Event it repeats refuses the batch with
    :class:`~routing.acceptance.envelopes.BatchConflict`. ``depth_checked`` as for :func:`event_accept`.
    """
    if not payloads:
        raise EnvelopeInvalid(None, "the batch is empty: it holds no Event")
    envelopes = _validated_batch(payloads, trusted=trusted, depth_checked=depth_checked)
    with transaction.atomic():
        _refuse_unknown_scopes_in_tx(envelopes, batch=True)
        results = events_accept_in_tx(envelopes=envelopes, clock=clock, accepted_by=accepted_by)
        conflicts = _conflicts(envelopes, results)
        if conflicts:
            raise BatchConflict([conflict.at(index) for index, conflict in conflicts.items()])
        return results


def _conflicts(envelopes: Sequence[Envelope], results: Sequence[Accepted]) -> dict[int, EventConflict]:
    """The duplicates whose body differs from the Event they repeat, by position."""
    conflicts: dict[int, EventConflict] = {}
    for index, (envelope, result) in enumerate(zip(envelopes, results, strict=True)):
        if not result.created:
            conflict = duplicate_conflict(envelope, result.event)
            if conflict is not None:
                conflicts[index] = conflict
    return conflicts


def duplicate_conflict(envelope: Envelope, accepted_event: Event) -> EventConflict | None:
    """Why acceptance answers 409 to ``envelope``, which repeats the ``(source, id)`` of
    ``accepted_event`` with another body; ``None`` when it is the same Event (stored once)."""
    accepted, offered = envelope_digest(event_envelope(accepted_event)), envelope_digest(envelope)
    if accepted == offered:
        return None
    return EventConflict(
        f"source {envelope.source!r} already sent an Event with id {envelope.id!r} "
        f"(#{accepted_event.seq}) with another body: the digest accepted is {accepted}, this "
        f"one is {offered}; send a new id for a new Event",
        seq=accepted_event.seq,
        accepted=accepted,
        offered=offered,
    )


def _validated(payload: Any, *, trusted: bool, depth_checked: bool = False) -> Envelope:
    envelope = parse_envelope(payload, trusted=trusted, depth_checked=depth_checked)
    check_event_size(payload)
    return envelope


def _validated_batch(
    payloads: Sequence[Any], *, trusted: bool, depth_checked: bool = False
) -> list[Envelope]:
    errors: list[EnvelopeInvalid] = []
    try:
        envelopes = parse_envelopes(list(payloads), trusted=trusted, depth_checked=depth_checked)
    except BatchInvalid as exc:
        errors.extend(exc.errors)
        envelopes = []
    failed = {error.index for error in errors}
    for index, payload in enumerate(payloads):
        if index in failed:
            continue
        try:
            check_event_size(payload)
        except EnvelopeInvalid as exc:
            errors.append(exc.at(index))
    if errors:
        raise BatchInvalid(sorted(errors, key=lambda error: error.index or 0))
    return envelopes


def check_event_size(payload: Any) -> None:
    # A decoded payload is measured as compact JSON: never more than the body it came in, so
    # an HTTP body that passed the raw size check passes this one too.
    check_size(encoded_size(payload), settings.CONDUIT_MAX_EVENT_BYTES)


def _refuse_unknown_scopes_in_tx(envelopes: Sequence[Envelope], *, batch: bool) -> None:
    """Refuse Events whose scope is not in the live generation (the newest applied one).

    A retry of an Event already accepted is not refused: it is acknowledged as the
    duplicate it is, whatever the configuration says now.
    """
    paths = sorted({envelope.scope for envelope in envelopes})
    known = live_scope_paths(paths)
    if all(envelope.scope in known for envelope in envelopes):
        return
    live = live_generation()
    errors = []
    for index, envelope in enumerate(envelopes):
        if envelope.scope in known:
            continue
        if Event.objects.filter(source=envelope.source, envelope_id=envelope.id).exists():
            continue
        if live is None:
            message = f"unknown scope {envelope.scope!r}: no configuration has been applied yet"
        else:
            message = (
                f"unknown scope {envelope.scope!r}: it is not in the live configuration "
                f"(generation {live.number})"
            )
        errors.append(EnvelopeInvalid("scope", message, index=index if batch else None))
    if errors:
        raise BatchInvalid(errors) if batch else errors[0]


def live_scope_paths(paths: Sequence[str]) -> set[str]:
    """Those of ``paths`` that are scopes of the live generation (the newest applied one).

    One statement on the way of every acceptance, written out once: the ORM's building and
    compiling of the same query cost several times its run on SQLite.
    """
    known: set[str] = set()
    with connection.cursor() as cursor:
        for start in range(0, len(paths), 500):
            chunk = paths[start : start + 500]
            cursor.execute(_live_scope_paths_sql(len(chunk)), [GenerationKind.APPLIED, *chunk])
            known.update(path for (path,) in cursor.fetchall())
    return known


@functools.cache
def _live_scope_paths_sql(count: int) -> str:
    quote = connection.ops.quote_name
    scope, generation = Scope._meta, Generation._meta
    return (
        f"SELECT {quote(scope.get_field('path').column)} FROM {quote(scope.db_table)} "
        f"WHERE {quote(scope.get_field('generation').column)} = ("
        f"SELECT {quote(generation.pk.column)} FROM {quote(generation.db_table)} "
        f"WHERE {quote(generation.get_field('kind').column)} = %s "
        f"ORDER BY {quote(generation.get_field('number').column)} DESC LIMIT 1) "
        f"AND {quote(scope.get_field('path').column)} IN ({', '.join(['%s'] * count)})"
    )


# --- api tokens -----------------------------------------------------------------------------

# last_used_at is a hint for operators, not an audit log: write it at most once a minute per
# token so that a busy client does not turn every API call into a write.
TOKEN_USE_RESOLUTION = timedelta(minutes=1)
TOKEN_NAME_MAX = 100


class ApiTokenInvalid(ValueError):
    """A token operation is refused; ``field`` names the argument at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A token just created, with its secret: the only time the secret exists in clear."""

    token: ApiToken
    secret: str


def api_token_create(
    *, user: AbstractBaseUser, name: str, clock: Clock, scopes: list[str] | None = None
) -> IssuedToken:
    """Create an API token for ``user``; the returned secret is shown once and never stored.

    ``scopes`` (names of ``routing.access.roles.TOKEN_SCOPES``) narrows the token to those actions;
    ``None`` lets it act with all of its user's permissions. Raises :class:`ApiTokenInvalid`
    for an inactive user, a bad name or an unknown scope (nothing stored).
    """
    if scopes is not None:
        unknown = sorted(set(scopes) - set(TOKEN_SCOPES))
        if unknown or not scopes:
            named = f"unknown scope {unknown[0]!r}" if unknown else "no scope"
            raise ApiTokenInvalid("scopes", f"{named}: choose from {', '.join(TOKEN_SCOPES)}")
        scopes = sorted(set(scopes))
    name = name.strip()
    if not name:
        raise ApiTokenInvalid("name", "a token needs a non-empty name")
    if len(name) > TOKEN_NAME_MAX:
        raise ApiTokenInvalid(
            "name", f"the name is {len(name)} characters long; the limit is {TOKEN_NAME_MAX}"
        )
    if not user.is_active:
        raise ApiTokenInvalid("user", f"user {user.get_username()!r} is inactive")
    with transaction.atomic():
        # Prefixes only name tokens for operators (the digest is the unique credential), so a
        # rare collision is simply avoided by drawing again.
        for _ in range(5):
            prefix, secret = token_generate()
            if not ApiToken.objects.filter(prefix=prefix).exists():
                break
        token = ApiToken.objects.create(
            user=user,
            name=name,
            prefix=prefix,
            digest=token_digest(secret),
            created_at=clock(),
            scopes=scopes,
        )
    return IssuedToken(token=token, secret=secret)


def api_token_create_for_username(
    *, username: str, name: str, clock: Clock, scopes: list[str] | None = None
) -> IssuedToken:
    """Create an API token for the user named ``username`` (see :func:`api_token_create`)."""
    user_model = get_user_model()
    try:
        user = user_model._default_manager.get_by_natural_key(username)
    except user_model.DoesNotExist:
        raise ApiTokenInvalid("USERNAME", f"no user named {username!r}") from None
    return api_token_create(user=user, name=name, clock=clock, scopes=scopes)


def api_token_revoke(*, prefix: str, clock: Clock) -> ApiToken:
    """Revoke the live token whose prefix is ``prefix``: it authenticates nothing from now on.

    Raises :class:`ApiTokenInvalid` when no token, or more than one, has that prefix, or when
    it was already revoked.
    """
    with transaction.atomic():
        tokens = list(ApiToken.objects.select_for_update().select_related("user").filter(prefix=prefix)[:2])
        if not tokens:
            raise ApiTokenInvalid("PREFIX", f"no API token has the prefix {prefix!r}")
        if len(tokens) > 1:
            raise ApiTokenInvalid(
                "PREFIX", f"several API tokens have the prefix {prefix!r}; revoke them in the admin"
            )
        token = tokens[0]
        if token.revoked_at is not None:
            raise ApiTokenInvalid(
                "PREFIX", f"API token {prefix} was already revoked at {token.revoked_at:%Y-%m-%d %H:%M:%S}Z"
            )
        token.revoked_at = clock()
        token.save(update_fields=["revoked_at"])
    return token


def api_token_authenticate(*, secret: str, clock: Clock) -> ApiToken | None:
    """The live token whose secret is ``secret`` (with its user), or ``None``.

    A revoked token, a token of an inactive user and a malformed secret authenticate
    nothing. Records when the token was last used (at most once a minute).
    """
    if not token_well_formed(secret):
        return None
    # Every API request runs this: two raw statements (a token, its user) cost a fifth of
    # the ORM's compiled select_related query, with the same model instances and converters.
    token = next(iter(ApiToken.objects.raw(_live_token_sql(), [token_digest(secret), True])), None)
    if token is None:
        return None
    user = next(iter(get_user_model().objects.raw(_user_sql(), [token.user_id])), None)
    if user is None:  # deleted since the read above
        return None
    token.user = user
    now = clock()
    if token.last_used_at is None or now - token.last_used_at >= TOKEN_USE_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


@functools.cache
def _live_token_sql() -> str:
    """A live token by digest: not revoked, of an active user (params: digest, True)."""
    quote = connection.ops.quote_name
    user = get_user_model()._meta
    token = ApiToken._meta
    return (
        f"SELECT t.* FROM {quote(token.db_table)} t JOIN {quote(user.db_table)} u "
        f"ON u.{quote(user.pk.column)} = t.{quote(token.get_field('user').column)} "
        f"WHERE t.{quote(token.get_field('digest').column)} = %s "
        f"AND t.{quote(token.get_field('revoked_at').column)} IS NULL "
        f"AND u.{quote(user.get_field('is_active').column)} = %s"
    )


@functools.cache
def _user_sql() -> str:
    """A user by primary key (param: the key)."""
    quote = connection.ops.quote_name
    user = get_user_model()._meta
    return f"SELECT * FROM {quote(user.db_table)} WHERE {quote(user.pk.column)} = %s"


# --- configuration --------------------------------------------------------------------------

# Applied generations are numbered max + 1 inside the transaction; on PostgreSQL one
# transaction-scoped advisory lock serialises numbering (the unique number is the backstop).
# SQLite serialises writers with BEGIN IMMEDIATE.
CONFIG_LOCK_ID = 0x436F6E66  # "Conf"
_CREATED_BY_MAX = Generation._meta.get_field("created_by").max_length


def config_apply(*, document: str, clock: Clock, created_by: str = "") -> Generation:
    """Validate a YAML configuration document and apply it as the next generation.

    The new applied generation (numbered one past the newest) is live for routing once this
    returns. Raises :class:`~routing.config.ConfigInvalid` listing every problem with its
    place; nothing is stored then.
    """
    parsed = parse_document(document)
    _check_created_by(created_by)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CONFIG_LOCK_ID])
        newest = Generation.objects.filter(kind=GenerationKind.APPLIED).aggregate(n=Max("number"))["n"]
        return _config_store_in_tx(
            parsed, kind=GenerationKind.APPLIED, number=(newest or 0) + 1, clock=clock, created_by=created_by
        )


def config_candidate(*, document: str, clock: Clock, created_by: str = "") -> Generation:
    """Validate a YAML configuration document and store it as a candidate: never live, for
    trace previews (R37). Raises :class:`~routing.config.ConfigInvalid`; nothing is stored
    then."""
    parsed = parse_document(document)
    _check_created_by(created_by)
    with transaction.atomic():
        return _config_store_in_tx(
            parsed, kind=GenerationKind.CANDIDATE, number=None, clock=clock, created_by=created_by
        )


def _check_created_by(created_by: str) -> None:
    if len(created_by) > _CREATED_BY_MAX:
        raise ValueError(f"created_by is longer than {_CREATED_BY_MAX} characters")


def _config_store_in_tx(
    parsed: ParsedDocument, *, kind: str, number: int | None, clock: Clock, created_by: str
) -> Generation:
    generation = Generation.objects.create(
        kind=kind,
        number=number,
        document=parsed.text,
        digest=parsed.digest,
        created_at=clock(),
        created_by=created_by,
    )
    bindings: list[Binding] = []
    routes: list[Route] = []
    for declared in parsed.scopes:
        scope = Scope.objects.create(generation=generation, path=declared.path)
        bindings.extend(
            Binding(
                scope=scope,
                name=b.name,
                executor=b.executor,
                settings=b.settings,
                controls=list(b.controls),
            )
            for b in declared.bindings
        )
        routes.extend(
            Route(
                scope=scope,
                position=position,
                slot=r.slot,
                handler=r.handler,
                params=r.params,
                binding=r.binding,
                policy=r.policy,
                fallback=r.fallback,
                start=r.start,
            )
            for position, r in enumerate(declared.routes)
        )
    Binding.objects.bulk_create(bindings)
    Route.objects.bulk_create(routes)
    return generation
