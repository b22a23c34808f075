"""The configuration the work loop dispatches with, read for it: the live generation, an
applied one by number, and the checks of a scope and a binding against the live one
(``worklife.dispatch.Configurations``). Reads only: the loop takes its decisions itself."""

from __future__ import annotations

from routing.config.selectors import find_generation, live_generation, load_configuration
from routing.config.validate import is_scope_path
from worklife.dispatch import AppliedGeneration


class LiveConfigurations:
    """Routing's configuration as the work loop reads it; ``work_loop`` hands it to its runner.
    Each generation's effective configuration is resolved once per process
    (:func:`~routing.config.selectors.load_configuration` keeps it)."""

    def live(self) -> AppliedGeneration | None:
        """The live generation, or ``None`` before the first apply."""
        generation = live_generation()
        if generation is None:
            return None
        return AppliedGeneration(generation.number, load_configuration(generation))

    def applied(self, number: int) -> AppliedGeneration:
        """The applied generation numbered ``number``."""
        return AppliedGeneration(number, load_configuration(find_generation(str(number))))

    def scope_problem(self, *, scope: str, binding: str = "") -> str:
        """Why the live generation has no scope ``scope`` (or no binding ``binding`` in it), or
        ``""``: what an attempt's wait on another scope (R42) and its child's binding are
        checked against."""
        if not is_scope_path(scope):
            return (
                f"{scope!r} is not a scope path (segments of letters, digits, '.', '_' or '-' joined by '/')"
            )
        generation = live_generation()
        if generation is None:
            return "no configuration has been applied"
        effective = load_configuration(generation).scope(scope)
        if effective is None:
            return f"unknown scope {scope!r}: it is not in the live configuration (generation {generation.number})"
        if binding and binding not in effective.bindings:
            return f"binding {binding!r} is not in scope {scope} (generation {generation.number})"
        return ""
