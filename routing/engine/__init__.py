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

The policy decision itself is :mod:`routing.decide`; asking the handlers is
:mod:`routing.evaluate` on :mod:`routing.handler_pool`; the loop is :mod:`routing.loop`.
"""
