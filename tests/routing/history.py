"""A history checker for several route loops sharing one database.

:func:`history_payloads` builds a stream whose targets overlap and are disjoint in turn: a few
hot conversation keys most windows share, many cold ones no two windows share, some named
explicitly at acceptance, some decided by the route, and Events with no target at all.
Routed with :data:`~tests.routing.routerkit.MATCH_ONLY`, the one correct outcome is known in
advance: the first Event of a key starts its Work, every later one is that Work's input, in
acceptance order; noise is dropped and the rest is unmatched. :func:`history_violations`
compares what the loops wrote with it, Event by Event:

- lost: an Event unrouted, without a route record, or missing from its Work's input;
- duplicated: an Event with two records or two inputs, a key with two owners, a Work too many;
- order: a Work's input inserted out of acceptance order, or a key's route records committed
  out of acceptance order (its commits are serialised: ids follow commit order).

It returns the violations found (none when the history is right), so a test asserts it is
empty and a benchmark counts the runs without one.
"""

from __future__ import annotations

import random
from collections import defaultdict

HOT_KEYS = 12


def history_payloads(n: int, *, cold_keys: int = 2_000, seed: int = 1) -> list[dict]:
    """N Events: about 35% on a few hot keys, 50% on many cold keys (a fifth of those named
    explicitly at acceptance), and noise and unmatched Events with no target."""
    rng = random.Random(seed)
    payloads = []
    for i in range(n):
        roll = rng.random()
        payload = {
            "specversion": "1.0",
            "id": f"h{i}",
            "source": "history",
            "scope": "acme",
            "type": "c.msg",
            "data": {},
        }
        if roll < 0.35:
            payload["data"]["k"] = f"hot{rng.randrange(HOT_KEYS)}"
        elif roll < 0.85:
            k = f"cold{rng.randrange(cold_keys)}"
            payload["data"]["k"] = k
            if rng.random() < 0.2:
                payload["correlation"] = [f"k:{k}"]
        elif roll < 0.93:
            payload["type"] = "noise.tick"
            payload["data"]["n"] = i
        else:
            payload["type"] = "other.thing"
            payload["data"]["n"] = i
        payloads.append(payload)
    return payloads


def history_violations(payloads: list[dict], *, limit: int = 20) -> list[str]:
    """What the database's routing history gets wrong for ``payloads`` (accepted in order, source
    ``history``, routed with MATCH_ONLY): at most ``limit`` lines, none when it is right."""
    from causal.models import Event, RouteState
    from routing.models import RouteRecord
    from worklife.models import CorrelationKey, Work, WorkInput

    problems: list[str] = []
    seq_of = dict(Event.objects.filter(source="history").values_list("envelope_id", "seq"))
    if len(seq_of) != len(payloads):
        problems.append(f"lost: {len(payloads) - len(seq_of)} Events not accepted")
    unrouted = list(Event.objects.filter(route_state=RouteState.UNROUTED).values_list("seq", flat=True)[:5])
    if unrouted:
        problems.append(f"lost: Events left unrouted, e.g. {unrouted}")
    records: dict[int, list[tuple[int, int | None]]] = defaultdict(list)
    for pk, seq, work in RouteRecord.objects.values_list("pk", "event_id", "work_id"):
        records[seq].append((pk, work))
    inputs: dict[int, list[int]] = defaultdict(list)
    input_events: dict[int, int] = defaultdict(int)
    for work, seq in WorkInput.objects.order_by("pk").values_list("work_id", "seq"):
        inputs[work].append(seq)
        input_events[seq] += 1
    owners: dict[str, list[int]] = defaultdict(list)
    for key, work in CorrelationKey.objects.filter(scope="acme").values_list("key", "work_id"):
        owners[key].append(work)

    # The sequential model: each key's Events in acceptance order, the first one starting its Work.
    by_key: dict[str, list[int]] = defaultdict(list)
    targetless: list[int] = []
    for payload in payloads:
        seq = seq_of.get(payload["id"])
        if seq is None:
            continue
        if payload["type"] == "c.msg":
            by_key[f"k:{payload['data']['k']}"].append(seq)
        else:
            targetless.append(seq)
        mine = records.get(seq, [])
        if len(mine) != 1:
            problems.append(
                f"{'lost' if not mine else 'duplicated'}: Event #{seq} has {len(mine)} route records"
            )
        if input_events.get(seq, 0) > 1:
            problems.append(f"duplicated: Event #{seq} is input {input_events[seq]} times")
    for seq in targetless:
        if any(work is not None for _, work in records.get(seq, [])) or input_events.get(seq):
            problems.append(f"Event #{seq} has no target but was given to a Work")
    for key, seqs in by_key.items():
        works = owners.get(key, [])
        if len(works) != 1:
            problems.append(f"duplicated: key {key} has {len(works)} owners")
            continue
        work = works[0]
        if inputs.get(work, []) != seqs:
            got = inputs.get(work, [])
            kind = "order" if sorted(got) == seqs else ("lost" if len(got) < len(seqs) else "duplicated")
            problems.append(f"{kind}: Work {work} of {key} took {got[:8]}…, expected {seqs[:8]}…")
        committed = sorted((pk, seq) for seq in seqs for pk, w in records.get(seq, []) if w == work)
        if [seq for _, seq in committed] != seqs:
            problems.append(f"order: the route records of {key} were committed out of acceptance order")
    triggers = dict(Work.objects.filter(scope="acme").values_list("pk", "trigger_id"))
    for key, seqs in by_key.items():
        if len(owners.get(key, [])) == 1 and triggers.get(owners[key][0]) != seqs[0]:
            problems.append(
                f"order: the Work of {key} was started by #{triggers.get(owners[key][0])}, not #{seqs[0]}"
            )
    works = len(triggers)
    if works != len(by_key):
        problems.append(f"duplicated: {works} Works for {len(by_key)} keys")
    return problems[:limit]
