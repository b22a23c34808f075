"""Python targets of the tests of dependency subscriptions (R42) and child bindings, run in worker processes."""

from __future__ import annotations

from worklife.child import CallRefused


def waits_on_scope(run):
    """Wait for a ``ci.build.*`` Event of the scope in ``params`` and say what came."""
    came = run.wait(type="ci.build.*", scope=run.params["scope"], timeout=60, name="build")
    return {"came": came["seq"] if came else None, "scope": came["scope"] if came else None}


def refused_waits(run):
    """Wait on each scope of ``params`` in turn: each must be refused."""
    refusals = []
    for scope in run.params["scopes"]:
        try:
            run.wait(type="ci.build.*", scope=scope, timeout=60)
        except CallRefused as refused:
            refusals.append(str(refused))
        else:
            refusals.append(None)
    return {"refusals": refusals}


def child_on(run):
    """Create a child on the binding in ``params``: its id, or why it was refused."""
    try:
        return {"child": run.create_child(run.params["binding"], keys=[f"kid-{run.work_id}"])}
    except CallRefused as refused:
        return {"refused": str(refused)}
