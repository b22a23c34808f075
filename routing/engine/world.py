"""World reads: what a route commit (and a trace) reads before it settles a window.

The Works, key owners, attempts and dependency subscriptions the window's Events may touch
(:func:`read_world`), the earlier unrouted input outside the window by the targets it blocks
(:func:`outside_blockers`, I4), and the causal limits' verdict on the wake bridges a window
plans (:class:`BridgeVerdicts`). Each costs a fixed number of queries per window."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from django.db.models import Q

from causal.limits import Causal, Refusal
from causal.models import Event, EventKey, RouteState
from infra.queries import CompiledOnce, Listed
from routing.engine.claims import consecutive, held_elsewhere, published_targets, undecided_or_held_elsewhere
from routing.engine.decide import SubscriptionView, WaitView, World
from routing.engine.evaluate import (
    Evaluation,
)
from routing.engine.settle import block, event_tokens
from routing.extension import EventSnapshot
from worklife.models import (
    Attempt,
    CorrelationKey,
    DependencySubscription,
    WaitState,
)
from worklife.views import WorkView, read_work_views

# Keys of a blocked-targets map that are no target: the earliest earlier Event whose targets
# are not known yet (another live loop holds it without having published them, or no pass has
# decided it), and the earliest of those that no live loop holds (its claim released or lapsed).
UNKNOWN_TARGETS = ("targets not known yet",)
UNKNOWN_AND_UNHELD = ("targets not known yet, held by no live loop",)


# How many earlier unrouted Events a commit reads in full; past it, only those that share a
# target with the window (or are undecided) are read.
BLOCKER_SCAN = 10_000


def explicit_tokens(events: Iterable[EventSnapshot]) -> set[tuple]:
    """The explicit targets (work ids, correlation keys) of ``events``, known at acceptance."""
    tokens: set[tuple] = set()
    for event in events:
        if event.work_id is not None:
            tokens.add(("work", event.work_id))
        for key in event.correlation or ():
            tokens.add(("key", event.scope, key))
    return tokens


def read_world(
    events: Sequence[EventSnapshot],
    evaluations: Mapping[int, Evaluation],
    now: datetime,
    memo: SnapshotReads | None = None,
) -> World:
    """The Works, key owners, attempts and dependency subscriptions the window's Events may
    touch. ``memo`` remembers what was read for the next windows read in the same read
    snapshot (a run of traces, where nothing changes in between)."""
    memo = memo if memo is not None else SnapshotReads(remember=False)
    world = World(now=now)
    keys_by_scope: dict[str, set[str]] = {}
    work_ids: set[int] = set()
    execution_ids: set[int] = set()
    for snap in events:
        wanted = keys_by_scope.setdefault(snap.scope, set())
        wanted.update(snap.correlation)
        evaluation = evaluations.get(snap.seq)
        if evaluation is not None and evaluation.decision is not None:
            wanted.update(evaluation.decision.keys)
            if evaluation.decision.work_id is not None:
                work_ids.add(evaluation.decision.work_id)
        if snap.work_id is not None:
            work_ids.add(snap.work_id)
        if snap.execution_id is not None:
            execution_ids.add(snap.execution_id)
    wanted_pairs = {(scope, key) for scope, keys in keys_by_scope.items() for key in keys}
    for pair, work_id in memo.owners(wanted_pairs).items():
        world.owners[pair] = work_id
        work_ids.add(work_id)
    for sub in memo.subscriptions(keys_by_scope):
        world.subscriptions.append(sub)
        work_ids.add(sub.work_id)
    for attempt_id, work_id in memo.attempt_work(execution_ids).items():
        world.attempt_work[attempt_id] = work_id
        work_ids.add(work_id)
    world.works.update(memo.works(work_ids))
    world.missing_works = work_ids - set(world.works)
    return world


class SnapshotReads:
    """The world reads of :func:`read_world`, remembered (``remember=True``) for later windows
    read in the same read snapshot (:func:`infra.snapshots.read_snapshot`): an impact
    preview traces thousands of Events, most of them about the same Works and keys, and
    nothing changes between its traces. Absent rows are remembered too. A route commit reads
    afresh (``remember=False``): the world changes between its windows."""

    def __init__(self, *, remember: bool = True) -> None:
        self.remember = remember
        self._owners: dict[tuple[str, str], int | None] = {}
        self._subscriptions: dict[frozenset[str], list[SubscriptionView]] = {}
        self._attempt_work: dict[int, int | None] = {}
        self._works: dict[int, WorkView | None] = {}

    def owners(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The Work owning each (scope, key) that has an owner."""
        return self._lookup(self._owners, pairs, read_owners)

    def attempt_work(self, attempt_ids: Iterable[int]) -> dict[int, int]:
        """The Work of each attempt that exists."""
        return self._lookup(self._attempt_work, attempt_ids, _read_attempt_work)

    def works(self, work_ids: Iterable[int]) -> dict[int, WorkView]:
        """What routing reads of each Work that exists (:func:`read_work_views`)."""
        return self._lookup(self._works, work_ids, read_work_views)

    def subscriptions(self, scopes: Iterable[str]) -> list[SubscriptionView]:
        """The active dependency subscriptions on ``scopes`` whose wait is active."""
        wanted = frozenset(scopes)
        if not self.remember:
            return read_subscriptions(wanted)
        if wanted not in self._subscriptions:
            self._subscriptions[wanted] = read_subscriptions(wanted)
        return list(self._subscriptions[wanted])

    def _lookup(self, known: dict, wanted: Iterable, read) -> dict:
        wanted = set(wanted)
        if not self.remember:
            return read(wanted) if wanted else {}
        missing = wanted - known.keys()
        if missing:
            found = read(missing)
            for item in missing:
                known[item] = found.get(item)
        return {item: known[item] for item in wanted if known[item] is not None}


def read_owners(pairs: set[tuple[str, str]]) -> dict[tuple[str, str], int]:
    by_scope: dict[str, list[str]] = {}
    for scope, key in pairs:
        by_scope.setdefault(scope, []).append(key)
    lists: list[list[str]] = []
    for scope in sorted(by_scope):
        lists += [[scope], sorted(by_scope[scope])]
    return {(scope, key): work_id for scope, key, work_id in _OWNERS.rows(*lists)}


def _owners_query(*lists: list[str]):
    """Key owners: ``lists`` alternates a one-scope list and that scope's keys."""
    condition = Q(pk__in=[])
    for scope, keys in zip(lists[::2], lists[1::2], strict=True):
        condition |= Q(scope=scope[0], key__in=Listed(keys))
    return CorrelationKey.objects.filter(condition).values_list("scope", "key", "work_id")


_OWNERS = CompiledOnce(_owners_query)


def _read_attempt_work(attempt_ids: set[int]) -> dict[int, int]:
    return dict(Attempt.objects.filter(pk__in=Listed(attempt_ids)).values_list("pk", "work_id"))


def read_subscriptions(scopes: frozenset[str]) -> list[SubscriptionView]:
    if not scopes:
        return []
    return [
        SubscriptionView(
            id=sub_id,
            work_id=work_id,
            work_scope=work_scope,
            wait=WaitView(wait_id, wait_name, dict(wait_match or {}), timeout_at, blocked_reason),
            scope=scope,
            match=dict(match or {}),
        )
        for (
            sub_id,
            work_id,
            scope,
            match,
            work_scope,
            wait_id,
            wait_name,
            wait_match,
            timeout_at,
            blocked_reason,
        ) in SUBSCRIPTIONS.rows(sorted(scopes))
    ]


# The active subscriptions on some scopes whose wait is active, with their wait and their
# Work's scope: read on every pass, built and compiled once per number of scopes.
SUBSCRIPTIONS = CompiledOnce(
    lambda scopes: DependencySubscription.objects.filter(
        active=True, scope__in=Listed(scopes), wait__state=WaitState.ACTIVE
    ).values_list(
        "pk",
        "work_id",
        "scope",
        "match",
        "work__scope",
        "wait_id",
        "wait__name",
        "wait__match",
        "wait__timeout_at",
        "wait__blocked_reason",
    )
)


def outside_blockers(
    events: Sequence[EventSnapshot],
    world: World,
    *,
    honour_claims: bool,
    now: datetime,
    evaluations: Mapping[int, Evaluation],
    owner: str,
    in_flight: dict[tuple, int] | None = None,
) -> dict[tuple, int]:
    """Earlier unrouted Events outside the window, by the targets they block (I4).

    With ``in_flight`` (a commit beside other loops' commits, PostgreSQL), an earlier Event
    another live loop holds whose routes' decisions that loop published is not an unknown:
    its targets go into ``in_flight`` instead (it is being committed beside this window, so
    the window's Events sharing one wait for that commit, unwritten)."""
    if not events:
        return {}
    window = [e.seq for e in events]
    blocked: dict[tuple, int] = {}
    last = max(window)
    if consecutive(window):
        # The Events before the window's last one outside it are those before its first,
        # read without the window's list (a range of the unrouted index instead of every
        # window entry checked against the list: about 0.4 ms a window of 500 on SQLite,
        # 1 ms on PostgreSQL, inside the commit).
        rows = EARLIER_UNROUTED_BEFORE.rows([min(window)])
    else:
        rows = EARLIER_UNROUTED.rows([last], window)
    if len(rows) == BLOCKER_SCAN:
        # More earlier unrouted input than one scan reads (a long backlog behind failing
        # input): of the rest, read what shares a target with the window or is undecided.
        tokens = set().union(*(event_tokens(e, evaluations.get(e.seq), world) for e in events))
        rest = (
            _earlier_unrouted([last], window)
            .filter(seq__gt=rows[-1][0])
            .filter(_sharing(tokens, honour_claims, now, owner))
        )
        rows.extend(rest.order_by("seq").values_list(*_BLOCKER_FIELDS))
    if not rows:
        return blocked
    seqs = [r[0] for r in rows]
    keys: dict[int, list[tuple[str, str]]] = {}
    for seq, scope, key in _EVENT_KEYS.rows(seqs):
        keys.setdefault(seq, []).append((scope, key))
    # Earlier Events another live loop holds now, looked at once for every use below.
    held_seqs = {row[0] for row in rows if held_elsewhere(row[4], row[5], owner=owner, now=now)}
    published: dict[int, tuple[list[str], int | None, str]] = {}
    if honour_claims and in_flight is not None:
        published = published_targets((row[0], row[4], row[5]) for row in rows if row[0] in held_seqs)
        for seq, scope, *_ in rows:
            if seq in published:
                keys.setdefault(seq, []).extend((scope, key) for key in published[seq][0])
    extra_keys = {k for pairs in keys.values() for k in pairs if k not in world.owners}
    owners = read_owners(extra_keys) if extra_keys else {}
    # The Work an earlier Event's execution id names is a target of it too (its lane), read
    # for the attempts the window's own Events do not name.
    attempt_work = world.attempt_work
    executions = {r[3] for r in rows if r[3] is not None and r[3] not in attempt_work}
    if executions:
        attempt_work = {**attempt_work, **_read_attempt_work(executions)}
    for seq, _scope, work_id, execution_id, _claimed_by, _claimed_until, reason in rows:
        held = seq in held_seqs
        decided = published.get(seq) if held else None
        if honour_claims and (held or not reason) and decided is None:
            # An earlier Event whose targets are not known yet: another live loop holds it,
            # or no pass has decided it (its claim was released or lapsed). Its route may
            # attach any key, so nothing after it commits before it does (acceptance order).
            blocked[UNKNOWN_TARGETS] = min(blocked.get(UNKNOWN_TARGETS, seq), seq)
            if not held and UNKNOWN_AND_UNHELD not in blocked:
                blocked[UNKNOWN_AND_UNHELD] = seq
        tokens: set[tuple] = set()
        if work_id is not None:
            tokens.add(("work", work_id))
        if execution_id is not None and execution_id in attempt_work:
            tokens.add(("work", attempt_work[execution_id]))
        for pair in keys.get(seq, []):
            tokens.add(("key", *pair))
            key_owner = world.owners.get(pair, owners.get(pair))
            if key_owner is not None:
                tokens.add(("work", key_owner))
        if decided is not None:
            if decided[1] is not None:
                tokens.add(("work", decided[1]))
            if decided[2]:
                # Its route's rate limit: the window's Events counting in it commit after it.
                tokens.add(("rate", decided[2]))
            block(in_flight, tokens, seq)
            continue
        block(blocked, tokens, seq)
    return blocked


_BLOCKER_FIELDS = (
    "seq",
    "scope",
    "work_id",
    "execution_id",
    "claimed_by",
    "claimed_until",
    "unrouted_reason",
)


def _unrouted_before(top: list[int]):
    """Unrouted Events before ``top[0]``."""
    return Event.objects.filter(route_state=RouteState.UNROUTED, seq__lt=top[0])


def _earlier_unrouted(top: list[int], window: list[int]):
    """Unrouted Events before ``top[0]`` outside ``window``."""
    return _unrouted_before(top).exclude(seq__in=Listed(window))


# Read on every pass: built and compiled once per shape (CompiledOnce).
EARLIER_UNROUTED = CompiledOnce(
    lambda top, window: (
        _earlier_unrouted(top, window).order_by("seq").values_list(*_BLOCKER_FIELDS)[:BLOCKER_SCAN]
    )
)
EARLIER_UNROUTED_BEFORE = CompiledOnce(
    lambda first: _unrouted_before(first).order_by("seq").values_list(*_BLOCKER_FIELDS)[:BLOCKER_SCAN]
)
_EVENT_KEYS = CompiledOnce(
    lambda seqs: EventKey.objects.filter(event_id__in=Listed(seqs)).values_list("event_id", "scope", "key")
)


def _sharing(tokens: set[tuple], honour_claims: bool, now: datetime, owner: str) -> Q:
    """Unrouted Events that share one of ``tokens`` (a key, a Work, through a key that
    Work owns or an attempt of it), or, for a route loop, whose route is not decided yet."""
    works = {t[1] for t in tokens if t[0] == "work"}
    keys = {(t[1], t[2]) for t in tokens if t[0] == "key"}
    keys.update(CorrelationKey.objects.filter(work_id__in=works).values_list("scope", "key"))
    sharing = (
        Q(work_id__in=works)
        | Q(execution_id__in=Attempt.objects.filter(work_id__in=works).values("pk"))
        | Q(seq__in=EventKey.objects.filter(_pairs(keys)).values("event_id"))
    )
    if honour_claims:
        sharing |= undecided_or_held_elsewhere(owner=owner, now=now)
    return sharing


def _pairs(pairs: Iterable[tuple[str, str]]) -> Q:
    """Rows whose (scope, key) is one of ``pairs``: one ``key IN`` per scope, so thousands of
    keys stay one shallow condition."""
    by_scope: dict[str, list[str]] = {}
    for scope, key in pairs:
        by_scope.setdefault(scope, []).append(key)
    condition = Q(pk__in=[])
    for scope, keys in by_scope.items():
        condition |= Q(scope=scope, key__in=Listed(sorted(keys)))
    return condition


class BridgeVerdicts:
    """The causal limits' verdict on each wake bridge a window plans (a
    :class:`~routing.engine.settle.BridgeLimits`): a dry run of derivation that counts the bridges
    planned before it on the same root, since they are derived only when the window is
    written. An Event in ``hypothetical`` is not accepted yet (a trace's): it would be a root
    of its own."""

    def __init__(self, causal: Causal, *, hypothetical: Iterable[int] = ()) -> None:
        self.causal = causal
        self.hypothetical = frozenset(hypothetical)
        self.planned: dict[int, int] = {}

    def refusal(self, event: EventSnapshot) -> Refusal | None:
        if event.seq in self.hypothetical:
            root, depth = None, event.depth
        else:
            row = Event.objects.filter(seq=event.seq).values_list("root_id", "depth").first()
            if row is None:
                return self.causal.would_refuse(parent=Event(seq=event.seq))
            root, depth = row[0] or event.seq, row[1]
        counted = root if root is not None else event.seq
        refusal = self.causal.would_refuse_child(
            parent_seq=event.seq, root_seq=root, depth=depth, pending=self.planned.get(counted, 0)
        )
        if refusal is None:
            self.planned[counted] = self.planned.get(counted, 0) + 1
        return refusal
