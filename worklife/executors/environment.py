"""A child's environment: built from an allow-list, the binding's ``env`` and the attempt
protocol's variables, never inherited whole (no server secret reaches a child)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from worklife.child import ATTEMPT_ID_ENV, CALL_FD_ENV, IDEMPOTENCY_KEY_ENV, TRACEPARENT_ENV, WORK_ID_ENV

# --- the child's environment --------------------------------------------------------------

ENV_ALLOWED = frozenset({"PATH", "HOME", "LANG", "TZ", "TMPDIR"})
"""Variables of the loop's own environment a child inherits (with every ``LC_*``): nothing
else of the server's environment reaches a child (``SECRET_KEY``, ``DATABASE_URL``, the
server's ``CONDUIT_*`` settings...)."""
ENV_ALLOWED_PREFIXES = ("LC_",)
PROCESS_MARK_ENV = "CONDUIT_PROCESS_MARK"
"""A random value per attempt process (not a secret) that its descendants inherit: what ends
them all where the machine offers no cgroup v2 (see :class:`Containment`)."""
ATTEMPT_ENV = frozenset({WORK_ID_ENV, ATTEMPT_ID_ENV, CALL_FD_ENV, PROCESS_MARK_ENV, IDEMPOTENCY_KEY_ENV})
"""The variables the attempt protocol sets in a child; a binding's ``env`` may not set them."""


def inherited_environment() -> dict[str, str]:
    """The part of the loop's environment every child gets: the allow-list, nothing more."""
    return {
        name: value
        for name, value in os.environ.items()
        if name in ENV_ALLOWED or name.startswith(ENV_ALLOWED_PREFIXES)
    }


def trace_environment(traceparent: str) -> dict[str, str]:
    """``TRACEPARENT``: the trace context of the Event that triggered the attempt (the
    attempt's, over one a binding's ``env`` might set), when its sender gave one."""
    return {TRACEPARENT_ENV: traceparent} if traceparent else {}


def env_setting_problems(settings: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``env``: a mapping of variable names to strings, set in the child's environment."""
    env = settings.get("env")
    if env is None:
        return
    if not isinstance(env, Mapping):
        yield "env", "expected a mapping of names to strings"
        return
    for name, value in env.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            yield f"env.{name}", "not a variable name"
        elif name in ATTEMPT_ENV:
            yield f"env.{name}", "set by the attempt protocol (a binding cannot set it)"
        elif not isinstance(value, str):
            yield f"env.{name}", "expected a string (quote numbers)"
        elif "\0" in value:
            yield f"env.{name}", "a NUL character cannot be in the environment"


def env_of_binding(settings: Mapping[str, Any]) -> dict[str, str]:
    return {str(name): str(value) for name, value in (settings.get("env") or {}).items()}
