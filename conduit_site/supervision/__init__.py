"""Supervision of ``manage.py serve``'s children: :mod:`~conduit_site.supervision.supervisor`
runs and restarts them, :mod:`~conduit_site.supervision.restarts` records each restart for
doctor and the console's banner."""
