"""The routing engine: accepted Events, in acceptance order, into Work.

One idea per module:

- :mod:`~routing.engine.router` — the pass: windows, evaluation, the commit (``Router``,
  ``build_router``);
- :mod:`~routing.engine.settle` — settlement: an Event's evaluation and the world into its
  outcome (the one path route commits and traces share);
- :mod:`~routing.engine.world` — world reads: Works, key owners, earlier unrouted input, the
  causal limits' verdict on wake bridges;
- :mod:`~routing.engine.writes` — writes: a window's settlements, set-based;
- :mod:`~routing.engine.failures` — route failures: counting, backoff, giving up, their store;
- :mod:`~routing.engine.claims` — claims and the commit lock (several route loops);
- :mod:`~routing.engine.options` — how a router runs;
- :mod:`~routing.engine.logs` — the ``route.decided`` log line, redacted.

- :mod:`~routing.engine.decide` — the policy decision, a pure function;
- :mod:`~routing.engine.evaluate` — asking a scope's routes, on
  :mod:`~routing.engine.handler_pool` (handler calls under deadlines);
- :mod:`~routing.engine.loop` — the route loop's host (a router per generation, heartbeats);
- :mod:`~routing.engine.dispatch` — what the Work engine asks before it runs an attempt;
- :mod:`~routing.engine.live` — live updates of open pages after a window commits.
"""
