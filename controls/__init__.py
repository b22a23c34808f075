"""Operator controls: on Events (skip, reroute: ``events``) and on Work (cancel, retry,
send input, create, rebind: ``work``). Each routes a control Event, so they live above
``worklife``."""
