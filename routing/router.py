"""The router's former module, kept so that code written against it still imports.

The router is the package :mod:`routing.engine` now (one idea per module; see its docstring).
New code imports from there; ``routing.loop`` and the ``route_loop`` command still use these
names.
"""

from routing.engine.claims import COMMIT_LOCK_ID, loop_identity, release_dead_claims
from routing.engine.failures import FAILURES_NAMESPACE, backoff_for, gives_up
from routing.engine.logs import redacted
from routing.engine.options import RouterOptions
from routing.engine.router import GenerationChanged, RouteOutcome, Router, build_router
from routing.engine.world import read_work_views

__all__ = [
    "COMMIT_LOCK_ID",
    "FAILURES_NAMESPACE",
    "GenerationChanged",
    "RouteOutcome",
    "Router",
    "RouterOptions",
    "backoff_for",
    "build_router",
    "gives_up",
    "loop_identity",
    "read_work_views",
    "redacted",
    "release_dead_claims",
]
