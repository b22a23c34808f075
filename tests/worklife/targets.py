"""Python targets the engine tests run in worker processes (imported there, not here)."""

from __future__ import annotations

import os
import subprocess
import time

from worklife.child import CallRefused


def echo(run):
    """Return the inputs' seqs, then what is injected until interrupted or 0.5 s idle."""
    seen = [item["seq"] for item in run.inputs]
    while not run.interrupted.is_set():
        item = run.receive(timeout=0.5)
        if item is None:
            break
        seen.append(item["seq"])
    print("echo saw", seen)
    return {"seen": seen, "interrupted": run.interrupted.is_set(), "reason": run.interrupt_reason}


def listen(run):
    """Take injected input until interrupted (no idle end)."""
    seen = [item["seq"] for item in run.inputs]
    while not run.interrupted.is_set():
        item = run.receive(timeout=0.05)
        if item is not None:
            seen.append(item["seq"])
    return {"seen": seen, "reason": run.interrupt_reason}


def boom(run):
    raise RuntimeError("agent crashed")


def forever(run):
    """Ignore interrupts; write its pid so a test can see the process end."""
    path = run.params.get("pidfile")
    if path:
        with open(path, "w") as handle:
            handle.write(str(os.getpid()))
    while True:
        time.sleep(0.05)


def noop(run):
    return None


def waits(run):
    """Wait for a matching Event (or the timeout in settings) and return what came."""
    came = run.wait(type="t.answer", timeout=run.params.get("wait_timeout"), name="answer")
    return {"came": came["seq"] if came else None}


def emits(run):
    return {"emitted": run.emit("t.derived", {"n": 1})}


def spawns(run):
    child = run.create_child("py", keys=[f"child-of-{run.work_id}"], data={"task": "sub"})
    return {"child": child}


def hands_over(run):
    run.successor("py", keys=[f"next-{run.work_id}"], data={"from": run.work_id})
    return "handed over"


def schedules(run):
    """Schedule a tick in 0.2 s and wait for it."""
    timer = run.schedule(0.2, "t.tick", {"n": 1})
    came = run.wait(type="t.tick", timeout=30, name="tick")
    return {"timer": timer, "came": came["seq"] if came else None}


def brief(run):
    """A short piece of work (so that a kill often lands while it runs)."""
    time.sleep(0.3)
    return {"seen": [item["seq"] for item in run.inputs]}


def traced(run):
    """What the attempt got of its trigger's trace context: run.traceparent and TRACEPARENT."""
    return {"run": run.traceparent, "env": os.environ.get("TRACEPARENT")}


def environment(run):
    """The worker's environment, as the target sees it."""
    return dict(os.environ)


def floods_stdout(run):
    """Write ``run.params["bytes"]`` bytes and a newline straight to file descriptor 1 (past
    ``sys.stdout``), then give the loop a moment to read them before the result."""
    size = int(run.params["bytes"])
    block = b"y" * (1024 * 1024)
    for _ in range(size // len(block)):
        os.write(1, block)
    os.write(1, b"y" * (size % len(block)) + b"\n")
    time.sleep(1.0)
    return "flooded"


def prints_once(run):
    """One ``print`` of ``run.params["bytes"]`` characters, then a short last line."""
    print("z" * int(run.params["bytes"]))
    print("the end")
    return "printed"


def huge_result(run):
    return "r" * int(run.params["bytes"])


def leaves_a_daemon(run):
    """Start ``sleep`` in a session of its own (``setsid``), write its pid, then return at
    once or run until ended."""
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(run.params["pidfile"], "w") as handle:
        handle.write(str(child.pid))
    if run.params.get("returns"):
        return child.pid
    while True:
        time.sleep(0.05)


def emits_as(run):
    """Make the emit calls of ``run.params["calls"]`` in order (``[name, the call's fields]``
    pairs: a list, as jsonb keeps no key order; a field ``<name>_chars: n`` becomes ``<name>``
    of n characters) and return, by name, the seq the loop answered or its refusal."""
    from worklife.child import CallRefused

    results = {}
    for name, fields in run.params["calls"]:
        call = {"op": "emit"}
        for key, value in fields.items():
            if key.endswith("_chars"):
                call[key[: -len("_chars")]] = "x" * value
            else:
                call[key] = value
        try:
            results[name] = {"seq": run._call(call)}
        except CallRefused as refused:
            results[name] = {"refused": str(refused)}
    return results


def emits_many(run):
    """Emit ``run.params["count"]`` Events, one call after the other; return how many the loop
    accepted and refused."""
    from worklife.child import CallRefused

    counts = {"accepted": 0, "refused": 0}
    for n in range(run.params["count"]):
        try:
            run.emit("t.loop", {"n": n})
        except CallRefused:
            counts["refused"] += 1
        else:
            counts["accepted"] += 1
    return counts


def patches_json(run):
    """Wrap ``json.dumps`` so that it keeps what it dumps in a builtin: a spy on whatever runs
    next in this process."""
    import builtins
    import json

    original = json.dumps
    builtins.conduit_spy = []

    def spying(obj, *args, **kwargs):
        builtins.conduit_spy.append(obj)
        return original(obj, *args, **kwargs)

    json.dumps = spying
    return "patched"


def reports_patches(run):
    """What this process's ``json.dumps`` is, and whether a spy was left in the builtins."""
    import builtins
    import json

    return {
        "json.dumps": f"{json.dumps.__module__}.{json.dumps.__qualname__}",
        "spy": hasattr(builtins, "conduit_spy"),
    }


def forger_or_victim(run):
    """A victim (the first input's ``role``) runs a while and returns ``"victim's own"``. A
    forger writes lines on the call descriptor as the worker's own would be, by ``mode``:

    - ``unsigned``: a result and an emit of this attempt without its secret, then a result for
      the next attempt (its id guessed) from a thread that outlives the attempt; returns ``"own"``;
    - ``next_only``: only the next attempt's result, from the thread;
    - ``own_then_next``: a result of its own, signed with its secret (it has it), saying the
      worker is fit for reuse; then, still running while the loop starts the next attempt in
      this worker, a result for that attempt; returns later.
    """
    import json
    import threading

    if run.inputs[0]["role"] == "victim":
        time.sleep(1.5)
        return "victim's own"
    fd = int(os.environ["CONDUIT_CALL_FD"])
    mode = run.inputs[0]["mode"]

    def forge(**fields):
        os.write(fd, (json.dumps(fields) + "\n").encode())

    if mode == "own_then_next":
        forge(
            op="result",
            ok=True,
            value="own",
            attempt=run.attempt_id,
            token=getattr(run, "_token", ""),
            reusable=True,
        )
        time.sleep(0.5)
        forge(op="result", ok=True, value="forged", attempt=run.attempt_id + 1)
        return "own, later"
    if mode == "unsigned":
        forge(op="result", ok=True, value="forged", attempt=run.attempt_id)
        forge(op="result", ok=True, value="forged", attempt=run.attempt_id, token="0" * 32)
        forge(op="emit", type="t.forged", id=1, attempt=run.attempt_id)

    def later():
        time.sleep(0.5)
        forge(op="result", ok=True, value="forged", attempt=run.attempt_id + 1)

    threading.Thread(target=later, daemon=True).start()
    time.sleep(0.3)
    return "own"


def leaves_a_thread(run):
    """Return at once, leaving a thread running in the worker."""
    import threading

    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
    return "left one"


def receives(run):
    """Block in ``run.receive`` far longer than any test: only an interrupt ends it in time."""
    started = time.monotonic()
    item = run.receive(timeout=600)
    return {
        "item": item,
        "interrupted": run.interrupted.is_set(),
        "reason": run.interrupt_reason,
        "blocked": round(time.monotonic() - started, 3),
    }


def keyed(run):
    """What an executor makes its side effects exactly-once with: the idempotency key, as
    ``run`` and the environment carry it. Fails once first when its input names a ``marker``
    file that does not exist yet (and creates it)."""
    marker = (run.inputs[0].get("data") or {}).get("marker") if run.inputs else None
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError(f"failing once with key {run.idempotency_key}")
    return {"key": run.idempotency_key, "env": os.environ.get("CONDUIT_IDEMPOTENCY_KEY")}


def runs_until_its_loop_dies(run):
    """Run far longer than any test, as a target that exhausts the machine's memory does until
    its loop is killed (the test kills it: a Work's process cannot signal its loop)."""
    time.sleep(60)


def sleeps(run):
    """A piece of work long enough for a kill of its loop to land while it runs."""
    time.sleep(float(run.params.get("seconds", 2)))
    return {"seen": [item["seq"] for item in run.inputs]}


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


def blink(run):
    """A very short piece of work (flow control's limits are checked over many of them)."""
    time.sleep(0.01)
    return None


def refuses_for_good(run):
    from worklife.child import NonRetryable

    raise NonRetryable("the request is malformed")


def asks_later(run):
    from worklife.child import RetryAfter

    raise RetryAfter(42, "rate limited")


def bad_value(run):
    raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "not text")


def spy_or_victim(run):
    """A spy (the first input's ``role``) wraps ``json.dumps``, which its process writes every
    line with, so that a result of any other attempt becomes ``{"FOREIGN": true}`` and the
    line's secret is kept, and returns at once leaving no thread. A victim waits a little and
    says what its process looks like: its own attempt, ``json.dumps``, the spy's builtin."""
    import builtins
    import json

    if run.inputs[0]["role"] == "victim":
        time.sleep(0.2)
        return {
            "attempt": run.attempt_id,
            "json.dumps": f"{json.dumps.__module__}.{json.dumps.__qualname__}",
            "spy": hasattr(builtins, "conduit_spy"),
        }
    original = json.dumps
    builtins.conduit_spy = []

    def spying(obj, *args, **kwargs):
        if isinstance(obj, dict) and obj.get("op") == "result" and obj.get("attempt") != run.attempt_id:
            builtins.conduit_spy.append(obj.get("token"))
            obj = {**obj, "value": {"FOREIGN": True}}
        return original(obj, *args, **kwargs)

    json.dumps = spying
    return "spying"


def peeks(run):
    """Try to read what a Work must not reach (``tests.worklife.isolationkit.PEEK``)."""
    from tests.worklife.isolationkit import peek

    print(peek(run.inputs[0]["data"]["paths"]))
    return "peeked"
