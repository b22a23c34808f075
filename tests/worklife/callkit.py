"""Attempts that make real calls: bindings of Python targets and of commands that make one call,
the configuration holding them, and sending an Event and reading the Work it started."""

from __future__ import annotations

import json
import sys

from causal.models import Event
from routing.models import RouteRecord
from tests.routing.routerkit import accept, router
from worklife.models import Attempt, Work

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
