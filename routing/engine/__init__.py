"""The routing engine: accepted Events, in acceptance order, into Work.

One idea per module:

- :mod:`~routing.engine.router` — the pass: windows, retries, the commit (``Router``,
  ``build_router``);
- :mod:`~routing.engine.asking` — asking a window's routes on the handler pool, under the
  deadline, Events backing off left out;
- :mod:`~routing.engine.pipeline` — the claim-ahead window (a backlog on a commit alone);
- :mod:`~routing.engine.coordination` — other route loops: published targets, carried Events,
  waiting for a commit beside this one;
- :mod:`~routing.engine.window` — ``settle_window``: a window's settlements on the world read
  now, the step the commit writes and trace only shows;
- :mod:`~routing.engine.settle` — settlement: one Event's evaluation and the world into its
  outcome;
- :mod:`~routing.engine.decide` — the policy decision, a pure function;
- :mod:`~routing.engine.evaluate` — asking one scope's routes about one Event;
- :mod:`~routing.engine.handler_pool` — handler calls on threads, under deadlines;
- :mod:`~routing.engine.world` — world reads: Works, key owners, earlier unrouted input, the
  causal limits' verdict on wake bridges;
- :mod:`~routing.engine.writes` — a window's settlements written, set-based (Work through
  ``worklife.intake``);
- :mod:`~routing.engine.failures` — route failures: counting, backoff, giving up, their store;
- :mod:`~routing.engine.claims` — claims and the commit lock (several route loops);
- :mod:`~routing.engine.options` — how a router runs;
- :mod:`~routing.engine.logs` — the ``route.decided`` log line, redacted;
- :mod:`~routing.engine.loop` — the route loop's host (a router per generation, heartbeats);
- :mod:`~routing.engine.configurations` — the configuration the work loop dispatches with,
  read for it;
- :mod:`~routing.engine.heartbeat` — the route loop's heartbeat entry, written and read;
- :mod:`~routing.engine.metrics` — the route loop's counters and latency histogram;
- :mod:`~routing.engine.live` — live updates of open pages after a window commits.
- :mod:`~routing.engine.selectors` — the public reads above the router: the binding a Work runs
  on next, the dead letters.
"""
