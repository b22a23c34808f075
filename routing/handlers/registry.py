"""The route-handler registry, fed by ``CONDUIT_ROUTE_HANDLERS``.

``CONDUIT_ROUTE_HANDLERS`` maps a handler name (what a route's ``handler:`` says) to a dotted
path, ``"pkg.mod.Class"`` or ``"pkg.mod:Class"``, so a user's own package adds handlers::

    CONDUIT_ROUTE_HANDLERS = {"match": "routing.handlers.Match", "mine": "myext.handlers:Mine"}

The registry is a :class:`~infra.plugins.PluginRegistry`, as the executors' is. A handler
class is instantiated once per configuration generation, with no arguments, and
implements ``match(event, route)`` (see :mod:`routing.extension`). It may also check a route's
``params`` when a configuration is validated, with a classmethod
``validate_params(params) -> Iterable[tuple[str, str]]`` yielding ``(place inside params,
message)`` for each problem; the configuration then refuses the document.

A lookup of a name that is not registered (or whose registration can no longer be imported:
its extension was removed) finds nothing: :func:`find_handler_class` returns ``None`` and
:func:`handler_class` raises :class:`HandlerMissing`. The router reports it as
``handler_missing`` (R10).
"""

from __future__ import annotations

from infra.plugins import PluginRegistry


class HandlerMissing(LookupError):
    """No usable route handler is registered under the name; the message says why."""


HANDLERS = PluginRegistry(
    setting="CONDUIT_ROUTE_HANDLERS",
    kind="handler",
    missing=HandlerMissing,
    shape="a class with a match method",
    accepts=lambda cls: callable(getattr(cls, "match", None)),
)


def registered_handlers() -> dict[str, str]:
    """``CONDUIT_ROUTE_HANDLERS`` as read now: handler name -> dotted path."""
    return HANDLERS.registered()


def handler_class(name: str) -> type:
    """The handler class registered as ``name``.

    Raises :class:`HandlerMissing` when the name is not registered, its path cannot be
    imported, or it names something without a ``match`` method.
    """
    return HANDLERS.load(name)


def find_handler_class(name: str) -> type | None:
    """The handler class registered as ``name``, or ``None`` when there is none usable."""
    return HANDLERS.find(name)
