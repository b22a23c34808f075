"""Dependency subscriptions made by real attempts (R42, issue 36 item 12) and a child on a
binding its scope lacks, refused at the call (issue 36 item 10): python workers and commands
run by a real work loop, Events accepted and routed by the real router."""

from __future__ import annotations

import json
import sys

import pytest
from django.db import transaction

from causal.models import Event
from routing.models import RouteRecord
from routing.setup.trace import trace
from tests.routing.routerkit import accept, apply, router
from tests.worklife.enginekit import runner, status, step_until
from worklife.attempts import attempts_end_in_tx
from worklife.models import Attempt, DependencySubscription, Wait, Work

pytestmark = pytest.mark.django_db(transaction=True)

TARGETS = "tests.worklife.targets"
# A command that makes one call (the JSON in argv[1], id 1), reads its reply and completes
# with it.
CALLS_ONCE = r"""
import json, sys
call = json.loads(sys.argv[1])
print("@conduit " + json.dumps({**call, "id": 1}), flush=True)
for line in sys.stdin:
    m = json.loads(line)
    if m["kind"] == "reply" and m["id"] == 1:
        break
print("@conduit " + json.dumps({"op": "complete", "result": m}), flush=True)
"""


def command(call: dict) -> dict:
    return {"executor": "command", "settings": {"argv": [sys.executable, "-c", CALLS_ONCE, json.dumps(call)]}}


def python(target: str, **params) -> dict:
    return {"executor": "python", "settings": {"target": f"{TARGETS}:{target}", "params": params}}


BINDINGS = {
    "py_waits": python("waits_on_scope", scope="ci"),
    "cmd_waits": command({"op": "wait", "match": {"type": "ci.build.*"}, "scope": "ci", "timeout": 60}),
    "py_refused": python("refused_waits", scopes=["nowhere", "Not a path!", "t/.."]),
    "cmd_refused": command({"op": "wait", "match": {"type": "ci.build.*"}, "scope": "nowhere"}),
    "cmd_bad_scope": command({"op": "wait", "match": {"type": "ci.build.*"}, "scope": 12}),
    "py_child": python("child_on", binding="nope"),
    "cmd_child": command({"op": "child", "binding": "nope", "keys": ["kid"]}),
    "py_child_ok": python("child_on", binding="inbox"),
    "cmd_successor": command({"op": "successor", "binding": "nope", "keys": ["next"]}),
    "cmd_successor_elsewhere": command(
        {"op": "successor", "binding": "inbox", "keys": ["next"], "scope": "ci"}
    ),
    "inbox": {},
}


def document() -> str:
    routes = [
        {"slot": name, "handler": "match", "params": {"type": f"t.{name}", "keys": ["k:{data.key}"]}}
        | {"binding": name, "policy": "queue"}
        for name in BINDINGS
    ]
    ci = {
        "path": "ci",
        "bindings": {"builds": {}},
        "routes": [
            {
                "slot": "builds",
                "handler": "match",
                "params": {"type": "ci.build.*", "keys": ["build:{data.n}"]},
                "binding": "builds",
                "policy": "queue",
            }
        ],
    }
    return json.dumps({"version": 1, "scopes": [{"path": "t", "bindings": BINDINGS, "routes": routes}, ci]})


@pytest.fixture(autouse=True)
def configured(clock, test_handlers):
    apply(clock, document())


@pytest.fixture
def loop(clock):
    r = runner(clock)
    yield r
    r.shutdown(grace=0)


def send(clock, type_: str, scope: str = "t", **data) -> Event:
    event = accept(clock, type_, data, scope=scope)
    r = router(clock)
    for _ in range(20):
        if not r.route_pending():
            break
    return event


def work_of(event: Event) -> Work:
    return Work.objects.get(pk=RouteRecord.objects.get(event_id=event.seq).work_id)


def result(work: Work) -> dict:
    return Attempt.objects.get(work=work).result


def test_r42_a_wait_across_scopes_subscribes_and_the_event_wakes_it(clock, loop):
    py = work_of(send(clock, "t.py_waits", key="p"))
    cmd = work_of(send(clock, "t.cmd_waits", key="c"))
    step_until(loop, lambda: status(py) == "waiting" and status(cmd) == "waiting")
    subscriptions = {s.work_id: s for s in DependencySubscription.objects.select_related("wait")}
    assert set(subscriptions) == {py.pk, cmd.pk}
    for work_id, sub in subscriptions.items():
        assert (sub.scope, sub.match, sub.active) == ("ci", {"type": "ci.build.*"}, True)
        assert (sub.wait.work_id, sub.wait.state) == (work_id, "active")

    # Another scope's Event the subscriptions do not match wakes nothing.
    lint = send(clock, "ci.lint", scope="ci", n=1)
    for _ in range(5):
        loop.step()
    assert (status(py), status(cmd)) == ("waiting", "waiting")
    assert RouteRecord.objects.get(event_id=lint.seq).policy == "unmatched"

    payload = {"id": "b2", "source": "ci", "type": "ci.build.done", "scope": "ci", "data": {"n": 2}}
    predicted = trace(payload=payload, clock=clock)
    waits = {w.work_id: w for w in Wait.objects.filter(state="active")}
    for work in (py, cmd):
        assert any(
            f"also wakes Work {work.pk}'s wait {waits[work.pk].name or waits[work.pk].pk} in scope t" in note
            for note in predicted.notes
        ), predicted.notes
    build = send(clock, "ci.build.done", scope="ci", n=2)
    # The handlers' own verdict is kept: the build starts its own Work in scope ci.
    record = RouteRecord.objects.get(event_id=build.seq)
    assert (record.route, Work.objects.get(pk=record.work_id).scope) == ("builds", "ci")
    step_until(loop, lambda: status(py) == "completed" and status(cmd) == "completed")
    assert result(py) == {"came": build.seq, "scope": "ci"}
    reply = result(cmd)
    assert (reply["ok"], reply["value"]["seq"], reply["value"]["scope"]) == (True, build.seq, "ci")
    assert set(Wait.objects.values_list("state", "woken_by")) == {("woken", build.seq)}
    assert not DependencySubscription.objects.filter(active=True).exists()
    bridges = Event.objects.filter(type="core.wait.woken")
    assert sorted(bridges.values_list("work_id", "parent_id", "scope")) == sorted(
        [(py.pk, build.seq, "t"), (cmd.pk, build.seq, "t")]
    )


def test_r42_a_wait_on_a_malformed_or_unknown_scope_is_refused_and_subscribes_nothing(clock, loop):
    py = work_of(send(clock, "t.py_refused", key="r"))
    cmd = work_of(send(clock, "t.cmd_refused", key="u"))
    bad = work_of(send(clock, "t.cmd_bad_scope", key="b"))
    step_until(loop, lambda: {status(py), status(cmd), status(bad)} == {"completed"})
    unknown, malformed, dots = result(py)["refusals"]
    assert unknown.startswith("wait refused: unknown scope 'nowhere'") and "live configuration" in unknown
    assert malformed.startswith("wait refused: 'Not a path!' is not a scope path")
    assert dots.startswith("wait refused: 't/..' is not a scope path")
    reply = result(cmd)
    assert not reply["ok"] and reply["error"].startswith("wait refused: unknown scope 'nowhere'")
    assert result(bad)["error"].startswith("wait refused: scope must be a scope path")
    assert not Wait.objects.exists() and not DependencySubscription.objects.exists()


def test_r42_an_attempt_ended_while_it_waits_ends_its_subscription(clock, loop):
    work = work_of(send(clock, "t.py_waits", key="x"))
    step_until(loop, lambda: status(work) == "waiting")
    (attempt,) = Attempt.objects.filter(work=work)
    with transaction.atomic():
        attempts_end_in_tx(attempts=[attempt], state="failed", now=clock())
    assert Wait.objects.get(work=work).state == "cancelled"
    assert not DependencySubscription.objects.filter(active=True).exists()


def test_a_child_on_a_binding_its_scope_lacks_is_refused_at_the_call(clock, loop):
    py = work_of(send(clock, "t.py_child", key="pc"))
    cmd = work_of(send(clock, "t.cmd_child", key="cc"))
    step_until(loop, lambda: status(py) == "completed" and status(cmd) == "completed")
    assert result(py)["refused"].startswith("child refused: binding 'nope' is not in scope t")
    reply = result(cmd)
    assert not reply["ok"] and reply["error"].startswith("child refused: binding 'nope' is not in scope t")
    assert set(Work.objects.values_list("pk", flat=True)) == {py.pk, cmd.pk}  # nothing created
    assert not Event.objects.filter(type="core.work.created").exists()
    # A binding the scope has still makes a child.
    ok = work_of(send(clock, "t.py_child_ok", key="ok"))
    step_until(loop, lambda: status(ok) == "completed")
    child = Work.objects.get(pk=result(ok)["child"])
    assert (child.parent_id, child.binding, child.scope) == (ok.pk, "inbox", "t")


def test_a_successor_on_a_binding_its_scope_lacks_is_refused_at_the_call(clock, loop):
    here = work_of(send(clock, "t.cmd_successor", key="s1"))
    there = work_of(send(clock, "t.cmd_successor_elsewhere", key="s2"))
    step_until(loop, lambda: status(here) == "completed" and status(there) == "completed")
    assert result(here)["error"].startswith("successor refused: binding 'nope' is not in scope t")
    assert result(there)["error"].startswith("successor refused: binding 'inbox' is not in scope ci")
    assert set(Work.objects.values_list("pk", flat=True)) == {here.pk, there.pk}  # nothing created
