"""Flow control: which claimable Work may start an attempt now, per binding and per key.

A binding may declare, beside its executor (docs/flow-control.md says each knob at length):

- ``concurrency: {limit: 3}`` or ``{limit: 1, key: "{data.channel}"}``: at most ``limit`` live
  attempts (running or parked in a wait) of the binding, or of each key rendered from the Work's
  input;
- ``throttle: {limit: 30, period: 60s, key: …}``: at most ``limit`` attempt starts per
  ``period``; throttled Work waits, it is never dropped;
- ``priority: 10``: claims take the highest priority first, then the oldest; a Work whose oldest
  pending input has waited ``CONDUIT_FLOW_AGING`` seconds (300) is claimed before any
  priority, oldest first (starvation is bounded by that);
- ``debounce: {quiet: 10s, max_wait: 60s}``: an attempt starts once the Work's input has been
  quiet for ``quiet``, or its oldest pending input has waited ``max_wait``;
- ``batch: {size: 20, wait: 30s}``: an attempt starts once ``size`` inputs are pending or the
  oldest has waited ``wait``.

An attempt always receives every pending input (:func:`worklife.scheduling.presentations_in_tx`),
so debounce and batch start one attempt for a burst.

Enforcement is in the database, in the claim transaction (:func:`flow_admit_in_tx`): the gate of
each limited binding or key is a :class:`~worklife.models.FlowGate` row locked ``FOR UPDATE``
(in name order), then its live attempts and recent starts are counted; the attempts started in
the same transaction carry the gate's name, and the lock is held until they are committed. Every
work loop on every host sees the same counts: no limit is per process. Held Work records the
hold (kind, one line, until when) on its row, so the Work pages, the API, ``work get``,
``/metrics`` and the Work list say it; a Work held on a concurrency gate is released as soon as
an attempt of that gate ends (:func:`flow_release`).
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, connections
from django.db.models import Case, Count, F, IntegerField, Max, Min, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce, Greatest, NullIf

from causal.models import Event
from causal.services import assert_in_tx
from infra.live import work_changed_on_commit
from infra.queries import in_list_chunks
from worklife.models import (
    ACTIVE_ATTEMPT_STATES,
    PRESENTED_KINDS,
    Attempt,
    FlowGate,
    HoldKind,
    InputState,
    Work,
    WorkInput,
    WorkStatus,
)

FLOW_KEYS = ("concurrency", "throttle", "priority", "debounce", "batch")
"""The binding keys flow control owns in the configuration document."""
ROUTE_FLOW_KEYS = ("priority", "rate_limit")
"""The route keys flow control owns (a route's ``rate_limit`` is enforced by the router, which
drops the Events over it: ``routing.engine.ratelimit``)."""

PRIORITY_RANGE = (-100, 100)
# A Work held on a concurrency gate is looked at again after this long even if no attempt of
# its gate is seen ending (an attempt another loop lost, a loop that died): its release is
# normally immediate (:func:`flow_release`).
CONCURRENCY_RECHECK = timedelta(seconds=30)
MAX_GATE_NAME = FlowGate._meta.get_field("name").max_length
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")


def aging_seconds() -> float:
    """How long a Work's oldest pending input waits before the Work is claimed ahead of every
    priority (``CONDUIT_FLOW_AGING``, 300 s): the bound on starvation."""
    return float(getattr(settings, "CONDUIT_FLOW_AGING", 300))


# --- the policy, as declared ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyTemplate:
    """A key rendered from the Work's input Event: literal text and dotted fields
    (``{data.channel}``), as correlation keys are written."""

    text: str
    parts: tuple[tuple[str, bool], ...]  # (literal text, False) or (field path, True)

    def render(self, event: Mapping[str, Any] | None) -> str:
        """The key for ``event`` (an Event as an attempt receives it); a missing or non-scalar
        field renders as ``-`` (the Work without the field share one key)."""
        out = []
        for text, is_field in self.parts:
            if not is_field:
                out.append(text)
                continue
            value: Any = event or {}
            for step in text.split("."):
                value = value.get(step) if isinstance(value, Mapping) else None
            if isinstance(value, bool):
                out.append("true" if value else "false")
            elif isinstance(value, str | int | float):
                out.append(str(value))
            else:
                out.append("-")
        return "".join(out)


@dataclass(frozen=True, slots=True)
class Limit:
    """A concurrency limit (``period`` 0) or a throttle (``period`` seconds), per binding or
    per rendered ``key``."""

    limit: int
    key: KeyTemplate | None = None
    period: float = 0.0


@dataclass(frozen=True, slots=True)
class Debounce:
    quiet: float
    max_wait: float | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    size: int
    wait: float


@dataclass(frozen=True, slots=True)
class FlowPolicy:
    """A binding's flow control (all off by default: no limit, priority 0)."""

    concurrency: Limit | None = None
    throttle: Limit | None = None
    priority: int = 0
    debounce: Debounce | None = None
    batch: Batch | None = None

    @property
    def gated(self) -> bool:
        """Whether a claim must lock a gate (a concurrency limit or a throttle)."""
        return self.concurrency is not None or self.throttle is not None

    @property
    def limits(self) -> bool:
        return self.gated or self.debounce is not None or self.batch is not None

    def describe(self) -> list[str]:
        """The policy in words, one clause per knob (the console and trace show them)."""
        out = []
        if self.concurrency is not None:
            out.append(f"concurrency {self.concurrency.limit}{_per(self.concurrency.key)}")
        if self.throttle is not None:
            out.append(
                f"throttle {self.throttle.limit} per {seconds_text(self.throttle.period)}{_per(self.throttle.key)}"
            )
        if self.priority:
            out.append(f"priority {self.priority}")
        if self.debounce is not None:
            most = f", at most {seconds_text(self.debounce.max_wait)}" if self.debounce.max_wait else ""
            out.append(f"debounce {seconds_text(self.debounce.quiet)}{most}")
        if self.batch is not None:
            out.append(f"batch {self.batch.size} or {seconds_text(self.batch.wait)}")
        return out


NO_FLOW = FlowPolicy()


def _per(key: KeyTemplate | None) -> str:
    return f" per key {key.text}" if key is not None else ""


def rate_limit_text(limit: Limit | None) -> str | None:
    """A route's rate limit in words (``30 per 60 s per key {data.user}``), ``None`` without one."""
    if limit is None:
        return None
    return f"{limit.limit} per {seconds_text(limit.period)}{_per(limit.key)}"


def seconds_text(seconds: float | None) -> str:
    """``30 s``, ``1.5 s``, ``2 min``: how the Work pages say a duration."""
    if seconds is None:
        return "-"
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def duration_parse(value: Any) -> float:
    """Seconds from a number or ``"10s"``, ``"500ms"``, ``"5m"``, ``"1h"``, ``"1d"``; raises
    ``ValueError`` saying what is expected."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 10s or 5m, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise ValueError(f"expected a duration like 10s, 500ms, 5m or 1h, got {value!r}")
    if seconds <= 0:
        raise ValueError(f"expected a positive duration, got {value!r}")
    return seconds


def key_parse(text: Any) -> KeyTemplate:
    """A key template like ``"{data.channel}"`` or ``"chat:{data.channel}"``; raises
    ``ValueError``."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"expected a key template string like '{{data.channel}}', got {text!r}")
    parts: list[tuple[str, bool]] = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"bad key template {text!r}: {exc}") from None
    for literal, field_name, format_spec, conversion in parsed:
        if literal:
            parts.append((literal, False))
        if field_name is None:
            continue
        if conversion or format_spec or not _FIELD.match(field_name):
            raise ValueError(f"bad key template {text!r}: name a field like {{data.channel}}")
        parts.append((field_name, True))
    if not any(is_field for _, is_field in parts):
        raise ValueError(f"key template {text!r} names no field: write one like {{data.channel}}")
    return KeyTemplate(text=text, parts=tuple(parts))


def _positive_int(value: Any, what: str) -> int:
    if type(value) is not int or value < 1:
        raise ValueError(f"{what}: expected a whole number of at least 1, got {value!r}")
    return value


def flow_parse(declared: Mapping[str, Any], place: str) -> tuple[FlowPolicy, list[tuple[str, str]]]:
    """A binding's flow keys (``concurrency``, ``throttle``, ``priority``, ``debounce``,
    ``batch``; others are ignored here) parsed, with every problem as ``(place, message)``."""
    problems: list[tuple[str, str]] = []
    found: dict[str, Any] = {}
    for name in _KNOB_KEYS:
        knob = _knob(name, declared.get(name), f"{place}.{name}", problems)
        if knob is not None:
            found[name] = knob
    priority, problem = priority_parse(declared.get("priority", 0))
    if problem:
        problems.append((f"{place}.priority", problem))
    if problems:
        return NO_FLOW, problems
    return FlowPolicy(priority=priority, **found), problems


# Each knob declared as a mapping, and its keys (a route's ``rate_limit`` is written as a throttle).
_KNOB_KEYS = {
    "concurrency": ("limit", "key"),
    "throttle": ("limit", "period", "key"),
    "debounce": ("quiet", "max_wait"),
    "batch": ("size", "wait"),
}


def _knob(name: str, raw: Any, where: str, problems: list[tuple[str, str]]) -> Any:
    """One knob declared as a mapping, parsed (``None`` when absent or invalid: its problems
    are appended to ``problems``)."""
    if raw is None:
        return None
    keys = _KNOB_KEYS[name]
    if not isinstance(raw, Mapping):
        problems.append((where, f"expected a mapping with {', '.join(keys)}, got {type(raw).__name__}"))
        return None
    for key in raw:
        if key not in keys:
            problems.append((f"{where}.{key}", f"unknown key {key!r} (expected one of: {', '.join(keys)})"))
    try:
        return _part(name, raw, where, problems)
    except _Skip:
        return None


def rate_limit_parse(value: Any, place: str) -> tuple[Limit | None, list[tuple[str, str]]]:
    """A route's ``rate_limit: {limit: N, period: P, key: T}`` (``key`` optional), written and
    checked as a binding's ``throttle`` is: the Limit (``None`` when not declared) and every
    problem as ``(place, message)``. The router drops the Events over it."""
    problems: list[tuple[str, str]] = []
    limit = _knob("throttle", value, place, problems)
    return (None if problems else limit), problems


def rate_limit_policy(stored: Mapping[str, Any] | None) -> Limit | None:
    """A stored route's rate limit (stored documents were validated: a problem here means the
    rules tightened since, and the limit is left off)."""
    if not stored:
        return None
    return rate_limit_parse(stored, "rate_limit")[0]


def priority_parse(value: Any) -> tuple[int, str]:
    """A binding's or a route's ``priority`` and ``""``, or 0 and what is wrong with it."""
    if type(value) is not int or not PRIORITY_RANGE[0] <= value <= PRIORITY_RANGE[1]:
        return 0, f"expected a whole number from {PRIORITY_RANGE[0]} to {PRIORITY_RANGE[1]}, got {value!r}"
    return value, ""


class _Skip(Exception):
    """A knob's field is missing or invalid: its problem is recorded, the knob left out."""


def _part(name: str, raw: Mapping[str, Any], where: str, problems: list[tuple[str, str]]) -> Any:
    def field(key: str, parse: Any, *, required: bool = True) -> Any:
        value = raw.get(key)
        if value is None:
            if required:
                problems.append((f"{where}.{key}", "required"))
                raise _Skip
            return None
        try:
            return parse(value)
        except ValueError as exc:
            problems.append((f"{where}.{key}", str(exc)))
            raise _Skip from None

    def count(value: Any) -> int:
        return _positive_int(value, "limit" if name != "batch" else "size")

    if name == "concurrency":
        return Limit(limit=field("limit", count), key=field("key", key_parse, required=False))
    if name == "throttle":
        return Limit(
            limit=field("limit", count),
            period=field("period", duration_parse),
            key=field("key", key_parse, required=False),
        )
    if name == "debounce":
        quiet = field("quiet", duration_parse)
        most = field("max_wait", duration_parse, required=False)
        if most is not None and most < quiet:
            problems.append((f"{where}.max_wait", f"must be at least quiet ({seconds_text(quiet)})"))
            raise _Skip
        return Debounce(quiet=quiet, max_wait=most)
    return Batch(size=field("size", count), wait=field("wait", duration_parse))


def flow_declared(declared: Mapping[str, Any]) -> dict[str, Any]:
    """The flow keys of a declared binding, as stored (plain JSON)."""
    return {key: declared[key] for key in FLOW_KEYS if declared.get(key) is not None}


def flow_policy(stored: Mapping[str, Any] | None) -> FlowPolicy:
    """A stored binding's policy (stored documents were validated: a problem here means the
    rules tightened since, and the knob is left off)."""
    if not stored:
        return NO_FLOW
    policy, problems = flow_parse(stored, "flow")
    return policy


# --- gates and holds ---------------------------------------------------------------------------


def gate_name(kind: str, scope: str, binding: str, key: str = "") -> str:
    """A gate's name: ``concurrency:acme:triage`` or ``throttle:acme:chat:C42`` (the scope that
    declares the binding, so the Work of the scopes inheriting it share the gate)."""
    name = f"{kind}:{scope}:{binding}" + (f":{key}" if key else "")
    return name[:MAX_GATE_NAME]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A claimable Work as flow control sees it: the binding it runs on next, the scope that
    declares that binding, and its policy."""

    work_id: int
    binding: str
    binding_scope: str
    policy: FlowPolicy


@dataclass(frozen=True, slots=True)
class Hold:
    """Why flow control holds a Work now, and until when (``None``: until a slot frees)."""

    kind: str
    text: str
    until: datetime | None
    gate: str = ""


@dataclass(frozen=True, slots=True)
class Admission:
    """The claim's verdict: by Work id, the gate names its attempt carries (admitted) or its
    hold."""

    admitted: dict[int, tuple[str, str]]
    held: dict[int, Hold]
    locked: bool = False


def _pending_facts(work_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Per Work: pending input count, first and last arrival, first seq (one query)."""
    rows = (
        WorkInput.objects.filter(
            work_id__in=list(work_ids), state=InputState.PENDING, kind__in=PRESENTED_KINDS
        )
        .values("work_id")
        .annotate(n=Count("pk"), first=Min("created_at"), last=Max("created_at"), seq=Min("seq"))
        .order_by()
    )
    return {row["work_id"]: row for row in rows}


def _key_events(work_ids: Sequence[int], facts: Mapping[int, Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    """The Event each Work's keys render from: its oldest pending input, else its trigger."""
    seqs = {w: facts[w]["seq"] for w in work_ids if w in facts}
    missing = [w for w in work_ids if w not in seqs]
    if missing:
        seqs.update(
            {
                pk: trigger
                for pk, trigger in Work.objects.filter(pk__in=missing, trigger__isnull=False).values_list(
                    "pk", "trigger_id"
                )
            }
        )
    events = Event.objects.in_bulk(list(set(seqs.values())))
    out = {}
    for work_id, seq in seqs.items():
        event = events.get(seq)
        if event is not None:
            out[work_id] = {
                "type": event.type,
                "source": event.source,
                "subject": event.subject,
                "scope": event.scope,
                "data": event.data,
            }
    return out


def _wait_hold(
    candidate: Candidate, facts: Mapping[str, Any] | None, now: datetime, retrying: set[int]
) -> Hold | None:
    """A debounce or batch hold from the Work's pending input, or ``None``; a retry (no pending
    input of its own, or a failed attempt's input presented again) is never held by them."""
    policy = candidate.policy
    if facts is None or candidate.work_id in retrying or (policy.debounce is None and policy.batch is None):
        return None
    first, last, n = facts["first"], facts["last"], facts["n"]
    if policy.debounce is not None:
        quiet_until = last + timedelta(seconds=policy.debounce.quiet)
        most = first + timedelta(seconds=policy.debounce.max_wait) if policy.debounce.max_wait else None
        until = min(quiet_until, most) if most is not None else quiet_until
        if until > now:
            why = (
                f"input quiet for {seconds_text(policy.debounce.quiet)}"
                if most is None or quiet_until <= most
                else f"at most {seconds_text(policy.debounce.max_wait)} after its first input"
            )
            return Hold(HoldKind.DEBOUNCE, f"debounced until {_clock(until)} ({why})", until)
    if policy.batch is not None and n < policy.batch.size:
        until = first + timedelta(seconds=policy.batch.wait)
        if until > now:
            return Hold(
                HoldKind.BATCH,
                f"batching until {_clock(until)} or {policy.batch.size} inputs ({n} pending)",
                until,
            )
    return None


def flow_admit_in_tx(*, candidates: Sequence[Candidate], now: datetime) -> Admission:
    """Which candidates may start an attempt now, in the caller's (claim) transaction, in the
    order given (the claim's: priority, then age). Records each hold on its Work's row
    (:func:`flow_hold_in_tx`); an admitted Work's hold ends as its attempt starts
    (:func:`worklife.scheduling.presentations_in_tx`). Gates are locked in name
    order; a fixed number of statements per pass plus two per gate."""
    assert_in_tx()
    admitted: dict[int, tuple[str, str]] = {}
    held: dict[int, Hold] = {}
    limited = [c for c in candidates if c.policy.limits]
    if not limited:
        for candidate in candidates:
            admitted[candidate.work_id] = ("", "")
        return Admission(admitted, held)
    # The pending input is read only for what needs it: debounce and batch, and keys.
    needs_input = [c.work_id for c in limited if c.policy.debounce or c.policy.batch or _keyed(c.policy)]
    facts = _pending_facts(needs_input) if needs_input else {}
    keyed = [c.work_id for c in limited if _keyed(c.policy)]
    events = _key_events(keyed, facts) if keyed else {}
    waiting = [c.work_id for c in limited if c.policy.debounce is not None or c.policy.batch is not None]
    retrying = (
        set(Work.objects.filter(pk__in=waiting, pending_run=True).values_list("pk", flat=True))
        if waiting
        else set()
    )
    gates: dict[int, tuple[str, str]] = {}
    for candidate in limited:
        hold = _wait_hold(candidate, facts.get(candidate.work_id), now, retrying)
        if hold is not None:
            held[candidate.work_id] = hold
            continue
        policy, event = candidate.policy, events.get(candidate.work_id)
        conc = (
            gate_name(
                "concurrency", candidate.binding_scope, candidate.binding, _render(policy.concurrency, event)
            )
            if policy.concurrency
            else ""
        )
        thr = (
            gate_name("throttle", candidate.binding_scope, candidate.binding, _render(policy.throttle, event))
            if policy.throttle
            else ""
        )
        gates[candidate.work_id] = (conc, thr)
    names = sorted({name for pair in gates.values() for name in pair if name})
    running: dict[str, int] = {}
    started: dict[str, tuple[int, datetime | None]] = {}
    if names:
        _lock_gates(names)
        periods = {
            thr: c.policy.throttle.period
            for c in limited
            if (thr := gates.get(c.work_id, ("", ""))[1]) and c.policy.throttle is not None
        }
        running, started = _gate_counts(names, periods, now)
    for candidate in candidates:
        work_id = candidate.work_id
        if work_id in held:
            continue
        conc, thr = gates.get(work_id, ("", ""))
        hold = _gate_hold(candidate, conc, thr, running, started, now)
        if hold is not None:
            held[work_id] = hold
            continue
        if thr:
            n, oldest = started.get(thr, (0, None))
            started[thr] = (n + 1, oldest or now)
        if conc:
            running[conc] = running.get(conc, 0) + 1
        admitted[work_id] = (conc, thr)
    flow_hold_in_tx(held=held, now=now)
    return Admission(admitted, held, locked=bool(names))


def _gate_counts(
    names: Sequence[str], periods: Mapping[str, float], now: datetime
) -> tuple[dict[str, int], dict[str, tuple[int, datetime | None]]]:
    """Live attempts per concurrency gate (one query) and, per throttle gate, the attempts
    started within its period and the oldest of them (one query each)."""
    running = dict(
        Attempt.objects.filter(concurrency_key__in=list(names), state__in=ACTIVE_ATTEMPT_STATES)
        .values("concurrency_key")
        .annotate(n=Count("pk"))
        .order_by()
        .values_list("concurrency_key", "n")
    )
    started: dict[str, tuple[int, datetime | None]] = {}
    for name, period in periods.items():
        row = Attempt.objects.filter(
            throttle_key=name, started_at__gt=now - timedelta(seconds=period)
        ).aggregate(n=Count("pk"), oldest=Min("started_at"))
        started[name] = (row["n"], row["oldest"])
    return running, started


def _gate_hold(
    candidate: Candidate,
    conc: str,
    thr: str,
    running: Mapping[str, int],
    started: Mapping[str, tuple[int, datetime | None]],
    now: datetime,
) -> Hold | None:
    """The hold of a candidate on its gates' counts, or ``None`` (it may start)."""
    policy = candidate.policy
    if conc and policy.concurrency is not None and running.get(conc, 0) >= policy.concurrency.limit:
        return Hold(
            HoldKind.CONCURRENCY,
            f"binding `{candidate.binding}` is at its concurrency limit {policy.concurrency.limit}"
            + _for_key(conc, candidate, "concurrency"),
            now + CONCURRENCY_RECHECK,
            gate=conc,
        )
    if thr and policy.throttle is not None:
        n, oldest = started.get(thr, (0, None))
        if n >= policy.throttle.limit:
            until = (oldest or now) + timedelta(seconds=policy.throttle.period)
            return Hold(
                HoldKind.THROTTLE,
                f"throttled until {_clock(until)}: binding `{candidate.binding}` started "
                f"{policy.throttle.limit} attempts in {seconds_text(policy.throttle.period)}"
                + _for_key(thr, candidate, "throttle"),
                max(until, now + timedelta(milliseconds=10)),
                gate=thr,
            )
    return None


def flow_preview(
    *,
    binding: str,
    binding_scope: str,
    policy: FlowPolicy,
    work_id: int | None,
    event: Mapping[str, Any],
    now: datetime,
) -> tuple[str, str]:
    """What flow control would do with the Work an Event is routed to: one line saying it and the
    kind of hold (``""``: it may start), or ``("", "")`` when the binding has no flow control;
    trace and the impact preview show it. The claim's own rules (:func:`flow_admit_in_tx`) on the
    counts now, with the Event as new pending input; reads only, no lock."""
    if policy == NO_FLOW:
        return "", ""
    candidate = Candidate(work_id or 0, binding, binding_scope, policy)
    facts = dict(_pending_facts([work_id]).get(work_id) or {}) if work_id else {}
    arrived = {"n": facts.get("n", 0) + 1, "first": facts.get("first") or now, "last": now}
    clauses = ", ".join(policy.describe())
    hold = _wait_hold(candidate, arrived, now, set())
    if hold is None:
        key_event = event
        if work_id and facts:
            key_event = _key_events([work_id], {work_id: facts}).get(work_id) or event
        conc = (
            gate_name("concurrency", binding_scope, binding, _render(policy.concurrency, key_event))
            if policy.concurrency
            else ""
        )
        thr = (
            gate_name("throttle", binding_scope, binding, _render(policy.throttle, key_event))
            if policy.throttle
            else ""
        )
        periods = {thr: policy.throttle.period} if thr and policy.throttle is not None else {}
        running, started = _gate_counts([n for n in (conc,) if n], periods, now)
        hold = _gate_hold(candidate, conc, thr, running, started, now)
    if hold is None:
        return f"flow control ({clauses}): its attempt may start now", ""
    text = hold.text if hold.kind != HoldKind.CONCURRENCY else f"held: {hold.text}"
    return f"flow control ({clauses}) would hold its attempt: {text}", str(hold.kind)


def _keyed(policy: FlowPolicy) -> bool:
    return bool((policy.concurrency and policy.concurrency.key) or (policy.throttle and policy.throttle.key))


def _render(limit: Limit | None, event: Mapping[str, Any] | None) -> str:
    return limit.key.render(event) if limit is not None and limit.key is not None else ""


def _for_key(gate: str, candidate: Candidate, kind: str) -> str:
    prefix = gate_name(kind, candidate.binding_scope, candidate.binding)
    key = gate[len(prefix) + 1 :] if len(gate) > len(prefix) else ""
    return f" for key `{key}`" if key else ""


def _clock(moment: datetime) -> str:
    from datetime import UTC

    return f"{moment.astimezone(UTC):%H:%M:%S}"


def _lock_gates(names: Sequence[str]) -> None:
    """Create the gates that do not exist yet and lock them all, in name order (two claims lock
    in the same order: no deadlock)."""
    wanted = list(names)
    locked = set(
        FlowGate.objects.select_for_update()
        .filter(name__in=wanted)
        .order_by("name")
        .values_list("name", flat=True)
    )
    if len(locked) < len(wanted):
        # First use of a gate: created (another claim may create it at the same time), then locked.
        FlowGate.objects.bulk_create(
            [FlowGate(name=n) for n in wanted if n not in locked], ignore_conflicts=True
        )
        list(FlowGate.objects.select_for_update().filter(name__in=wanted).order_by("name").values_list("pk"))


def flow_hold_in_tx(*, held: Mapping[int, Hold], now: datetime) -> None:
    """Record each hold on its Work's row: one statement per distinct hold. The Work's version
    is not bumped: a hold changes nothing routing decides (its pages are told)."""
    if not held:
        return
    groups: dict[Hold, list[int]] = {}
    for work_id, hold in held.items():
        groups.setdefault(hold, []).append(work_id)
    for hold, work_ids in groups.items():
        Work.objects.filter(pk__in=work_ids, status=WorkStatus.READY).update(
            hold_kind=hold.kind, hold_reason=hold.text[:500], hold_gate=hold.gate, held_until=hold.until
        )
    work_changed_on_commit(list(held))


def flow_inputs_arrived_in_tx(work_ids: Sequence[int]) -> None:
    """New input for ``work_ids`` (the router's commit): the Work batching its input is claimable
    again, so the next claim sees whether its batch is full. One statement."""
    # ``Work.objects.filter(pk__in=work_ids, hold_kind=BATCH, held_until__isnull=False)
    # .update(held_until=None)`` through a statement written once per padded number of Works:
    # the ORM built the IN list value by value on every window (about 1 ms a window of 500).
    for keys, params in in_list_chunks(connection, sorted(set(work_ids))):
        with connection.cursor() as cursor:
            cursor.execute(_batch_arrived_sql(connection.alias, keys), [*params, HoldKind.BATCH.value])


@functools.lru_cache(maxsize=64)
def _batch_arrived_sql(alias: str, keys: str) -> str:
    quote = connections[alias].ops.quote_name
    meta = Work._meta
    held_until, hold_kind = (quote(meta.get_field(name).column) for name in ("held_until", "hold_kind"))
    return (
        f"UPDATE {quote(meta.db_table)} SET {held_until} = NULL "
        f"WHERE {quote(meta.pk.column)} IN {keys} AND {hold_kind} = %s AND {held_until} IS NOT NULL"
    )


def flow_release(*, attempt_ids: Iterable[int] = (), gates: Iterable[str] = ()) -> int:
    """Release the Work held on the concurrency gates of attempts that ended (their ids, or their
    gates when the caller knows them): they are claimable again at once (oldest first); returns
    how many. Meant for the claim's transaction (no commit of its own); two statements at most."""
    ids = list(attempt_ids)
    gates = {gate for gate in gates if gate}
    if ids:
        gates.update(
            Attempt.objects.filter(pk__in=ids)
            .exclude(concurrency_key="")
            .values_list("concurrency_key", flat=True)
        )
    if not gates:
        return 0
    released = Work.objects.filter(hold_gate__in=sorted(gates), hold_kind=HoldKind.CONCURRENCY).update(
        held_until=None
    )
    return released


# --- claim order -------------------------------------------------------------------------------


def flow_claim_order(
    priorities: Mapping[tuple[str, str], int], *, now: datetime, routes: bool = False
) -> tuple[list[Any], dict[str, Any]]:
    """The claim's order as ``(order_by, annotations)``: with no priority declared, by id (oldest
    first, the index's order); otherwise Work whose oldest pending input waited
    :func:`aging_seconds` first (oldest first), then the highest priority (the binding's it runs
    on, by Work scope and binding name in ``priorities``; with ``routes``, raised to the highest of
    its pending input's routes'), then the oldest."""
    if not priorities and not routes:
        return ["id"], {}
    binding = Coalesce(NullIf(F("retry_binding"), Value("")), F("binding"))
    whens = [
        When(Q(scope=scope, flow_binding=name), then=Value(p))
        for (scope, name), p in sorted(priorities.items())
    ]
    pending = WorkInput.objects.filter(work=OuterRef("pk"), state=InputState.PENDING)
    aged_before = now - timedelta(seconds=aging_seconds())
    annotations: dict[str, Any] = {
        "flow_binding": binding,
        "flow_oldest": Subquery(pending.order_by("seq").values("created_at")[:1]),
    }
    own: Any = Case(*whens, default=Value(0), output_field=IntegerField()) if whens else Value(0)
    if routes:
        raised = Coalesce(Subquery(pending.order_by("-priority").values("priority")[:1]), Value(0))
        own = Greatest(own, raised, output_field=IntegerField())
    annotations["flow_priority"] = own
    aged = Case(
        When(flow_oldest__lte=aged_before, then=Value(1)), default=Value(0), output_field=IntegerField()
    )
    priority = Case(
        When(flow_oldest__lte=aged_before, then=Value(0)),
        default=F("flow_priority"),
        output_field=IntegerField(),
    )
    return [aged.desc(), priority.desc(), "id"], annotations


def routes_raise_priority(configuration: Any) -> bool:
    """Whether any route of a configuration raises its Work's priority (``route_priorities``)."""
    return bool(getattr(configuration, "route_priorities", None))


def priorities_of(configuration: Any) -> dict[tuple[str, str], int]:
    """``(Work scope, binding name) -> priority`` for every binding with a priority in a
    configuration's effective scopes (``scopes``: path -> scope with ``bindings``)."""
    out = {}
    for path, scope in dict(getattr(configuration, "scopes", None) or {}).items():
        for name, binding in scope.bindings.items():
            policy = getattr(binding, "flow", NO_FLOW)
            if policy.priority:
                out[(path, name)] = policy.priority
    return out


# --- what the pages read -----------------------------------------------------------------------


def flow_hold_active(work: Work, now: datetime) -> bool:
    """Whether flow control holds ``work`` at ``now`` (its row alone, no query)."""
    return (
        work.status == WorkStatus.READY
        and bool(work.hold_kind)
        and work.held_until is not None
        and work.held_until > now
    )


def flow_held_at(now: datetime) -> Q:
    """The Work flow control holds at ``now``, as a query (:func:`flow_hold_active` for many)."""
    return Q(status=WorkStatus.READY, parked_at__isnull=True, held_until__gt=now) & ~Q(hold_kind="")


def flow_hold_text(work: Work, *, running_shown: int = 5) -> str:
    """The Work's hold in one line; a concurrency hold names the Work running on its gate
    (one query)."""
    text = work.hold_reason
    if work.hold_kind == HoldKind.CONCURRENCY and work.hold_gate:
        ids = list(
            Attempt.objects.filter(concurrency_key=work.hold_gate, state__in=ACTIVE_ATTEMPT_STATES)
            .order_by("work_id")
            .values_list("work_id", flat=True)[: running_shown + 1]
        )
        shown = ", ".join(str(i) for i in ids[:running_shown]) + (", …" if len(ids) > running_shown else "")
        text += f" — running: Work {shown}" if ids else " — a slot is free: it starts on the next claim"
    if work.hold_kind in (HoldKind.DEBOUNCE, HoldKind.BATCH, HoldKind.THROTTLE):
        return text
    return f"held: {text}"


def flow_holds_by_kind(now: datetime) -> dict[str, int]:
    """How many Work flow control holds now, by kind (one query): ``/metrics``."""
    counts = dict(
        Work.objects.filter(flow_held_at(now))
        .values("hold_kind")
        .annotate(n=Count("pk"))
        .order_by()
        .values_list("hold_kind", "n")
    )
    return {kind: counts.get(kind, 0) for kind in HoldKind.values}


def flow_hold_line(work: Work, *, now: datetime | None = None) -> str:
    """The Work's flow control hold as ``work get`` prints it (``""``: none now)."""
    from causal.clock import system_clock

    if not flow_hold_active(work, now or system_clock()):
        return ""
    assert work.held_until is not None
    return f"{flow_hold_text(work)} (looked at again by {_clock(work.held_until)} UTC at the latest)"


def flow_next_release(now: datetime) -> float | None:
    """Seconds until the first Work flow control holds may start (``None``: none is held; 0: one
    is due now): what ``work_loop --drain`` waits for. One query."""
    until = Work.objects.filter(flow_held_at(now)).aggregate(first=Min("held_until"))["first"]
    return max((until - now).total_seconds(), 0.0) if until is not None else None
