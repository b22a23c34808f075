"""Route handlers: the built-in ``match`` handler and the registry that names handlers.

The route-handler API itself is :mod:`routing.extension` (a public contract). ``Match`` is
exported here so that its documented dotted name, ``routing.handlers.Match``, keeps working
in ``CONDUIT_ROUTE_HANDLERS``.
"""

from routing.handlers.match import Match

__all__ = ["Match"]
