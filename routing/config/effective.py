"""The effective configuration (R3): per scope, the routes resolved root to leaf with override
slots replaced in place, and the bindings visible there, a child's redefinition winning."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from routing.config.document import ParsedScope
from routing.extension import RouteInfo, freeze
from worklife.flow import NO_FLOW, FlowPolicy, Limit, flow_policy, rate_limit_policy, rate_limit_text


@dataclass(frozen=True, slots=True)
class EffectiveBinding:
    """A binding visible in a scope.

    ``capabilities`` is the claimed controls the implementation class really supports (R2),
    computed against the executors registered now; ``problem`` says why the binding cannot
    run as declared (its executor was unregistered, or no longer implements a claimed
    control), ``""`` when it can. ``redefines`` names the ancestor scope whose binding of the
    same name this one hides.
    """

    name: str
    scope: str
    executor: str
    settings: Mapping[str, Any]
    controls: tuple[str, ...]
    capabilities: frozenset[str]
    redefines: str = ""
    problem: str = ""
    flow: FlowPolicy = NO_FLOW
    # The retry policy as declared (``worklife.retry``), ``None``: the defaults.
    retry: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class EffectiveRoute:
    """A route in effect in a scope. ``scope`` is the scope that declares it; ``overrides``
    names the ancestor scope whose route in the same slot it replaced."""

    slot: str
    scope: str
    handler: str
    params: Mapping[str, Any]
    binding: str
    policy: str
    fallback: str
    start: bool
    overrides: str = ""
    priority: int = 0
    # At most ``limit`` Events taken per ``period`` (per rendered key), the others dropped
    # (routing.engine.ratelimit); ``None``: no rate limit.
    rate_limit: Limit | None = None
    _info: RouteInfo | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        info = RouteInfo(
            slot=self.slot,
            scope=self.scope,
            params=self.params,
            binding=self.binding,
            policy=self.policy,
            fallback=self.fallback,
            start=self.start,
            handler=self.handler,
        )
        object.__setattr__(self, "_info", info)

    def info(self) -> RouteInfo:
        """The :class:`~routing.extension.RouteInfo` handlers receive (one shared instance,
        so a handler's per-params cache stays warm)."""
        assert self._info is not None
        return self._info


@dataclass(frozen=True, slots=True)
class EffectiveScope:
    """A scope's routes resolved root to leaf and the bindings visible in it (R3)."""

    path: str
    routes: tuple[EffectiveRoute, ...]
    bindings: Mapping[str, EffectiveBinding]
    # The schedules declared in this scope itself (never inherited): frozen, each with a name.
    schedules: tuple[Mapping[str, Any], ...] = ()

    def route(self, slot: str) -> EffectiveRoute | None:
        """The route in effect in ``slot``, if any."""
        return next((route for route in self.routes if route.slot == slot), None)


@dataclass(frozen=True)
class Configuration:
    """One generation's effective configuration, immutable. ``label`` is the generation
    number (``"3"``) or ``"candidate"``; ``default_scope`` the scope an Event offered without
    one takes ("": none)."""

    generation_id: int
    label: str
    scopes: Mapping[str, EffectiveScope]
    default_scope: str = ""

    def scope(self, path: str) -> EffectiveScope | None:
        """The effective scope declared at ``path``, or ``None``."""
        return self.scopes.get(path)

    @functools.cached_property
    def route_priorities(self) -> Mapping[tuple[str, str], int]:
        """``(declaring scope, slot) -> priority`` of the routes that raise their Work's priority
        (a route's ``priority``; worklife.flow), computed once per configuration."""
        return MappingProxyType(
            {
                (route.scope, route.slot): route.priority
                for scope in self.scopes.values()
                for route in scope.routes
                if route.priority
            }
        )

    @functools.cached_property
    def rate_limited(self) -> bool:
        """Whether any route of the configuration declares a rate limit (without one, routing
        reads and writes nothing for rate limits)."""
        return any(route.rate_limit is not None for scope in self.scopes.values() for route in scope.routes)

    def scope_or_empty(self, path: str) -> EffectiveScope:
        """The effective scope at ``path``; a scope that left the configuration has no routes
        and no bindings (no route can select its Events)."""
        return self.scopes.get(path) or EffectiveScope(path=path, routes=(), bindings={})


def _binding_state(executor: str, controls: Sequence[str]) -> tuple[frozenset[str], str]:
    """Capabilities and problem of a stored binding, against the executors registered now."""
    # Imported when a configuration is resolved, not with this module: a reader of stored
    # generations that resolves none (``events get``) does not load the executors.
    from worklife.executors import ExecutorMissing, executor_class, supported_controls

    if not executor:
        return frozenset(), ("a queue-only binding cannot claim controls" if controls else "")
    try:
        cls = executor_class(executor)
    except ExecutorMissing as exc:
        return frozenset(), str(exc)
    supported = supported_controls(cls)
    missing = [control for control in controls if control not in supported]
    capabilities = frozenset(control for control in controls if control in supported)
    problem = f"executor {executor!r} does not implement {', '.join(missing)}" if missing else ""
    return capabilities, problem


def resolve_scopes(scopes: Iterable[ParsedScope]) -> dict[str, EffectiveScope]:
    """Resolve declared scopes root to leaf (R3). A scope whose parent is not declared is
    resolved from its nearest declared ancestor (a parsed document never has one)."""
    ordered = sorted(scopes, key=lambda s: (s.path.count("/"), s.path))
    resolved: dict[str, EffectiveScope] = {}
    for declared in ordered:
        parent: EffectiveScope | None = None
        ancestor = declared.parent_path
        while ancestor is not None and parent is None:
            parent = resolved.get(ancestor)
            ancestor = ancestor.rpartition("/")[0] or None
        bindings: dict[str, EffectiveBinding] = dict(parent.bindings) if parent else {}
        for binding in declared.bindings:
            inherited = bindings.get(binding.name)
            capabilities, problem = _binding_state(binding.executor, binding.controls)
            bindings[binding.name] = EffectiveBinding(
                name=binding.name,
                scope=declared.path,
                executor=binding.executor,
                settings=freeze(binding.settings),
                controls=tuple(binding.controls),
                capabilities=capabilities,
                redefines=inherited.scope if inherited else "",
                problem=problem,
                flow=flow_policy(binding.flow),
                retry=freeze(binding.retry) if binding.retry else None,
            )
        routes: list[EffectiveRoute] = list(parent.routes) if parent else []
        index = {route.slot: position for position, route in enumerate(routes)}
        for route in declared.routes:
            replaced = index.get(route.slot)
            effective = EffectiveRoute(
                slot=route.slot,
                scope=declared.path,
                handler=route.handler,
                params=freeze(route.params),
                binding=route.binding,
                policy=route.policy,
                fallback=route.fallback,
                start=route.start,
                overrides=routes[replaced].scope if replaced is not None else "",
                priority=route.priority,
                rate_limit=rate_limit_policy(route.rate_limit),
            )
            if replaced is None:
                index[route.slot] = len(routes)
                routes.append(effective)
            else:
                routes[replaced] = effective
        resolved[declared.path] = EffectiveScope(
            path=declared.path,
            routes=tuple(routes),
            bindings=MappingProxyType(bindings),
            schedules=tuple(freeze(s) for s in declared.schedules),
        )
    return resolved


def build_configuration(
    scopes: Iterable[ParsedScope],
    *,
    generation_id: int = 0,
    label: str = "candidate",
    default_scope: str = "",
) -> Configuration:
    """The effective configuration of declared scopes (a parsed document's, or a stored
    generation's). Everything is copied and frozen: changing the declarations' dicts afterwards
    changes nothing (R1)."""
    return Configuration(
        generation_id=generation_id,
        label=label,
        scopes=MappingProxyType(resolve_scopes(scopes)),
        default_scope=default_scope,
    )


def effective_scope_as_dict(scope: EffectiveScope) -> dict[str, Any]:
    """A JSON-ready description of an effective scope (for ``config show --json``)."""

    def thaw(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: thaw(v) for k, v in value.items()}
        if isinstance(value, tuple | list):
            return [thaw(v) for v in value]
        return value

    return {
        "path": scope.path,
        "routes": [
            {
                "slot": r.slot,
                "scope": r.scope,
                "overrides": r.overrides,
                "handler": r.handler,
                "params": thaw(r.params),
                "binding": r.binding,
                "policy": r.policy,
                "fallback": r.fallback,
                "start": r.start,
                "priority": r.priority,
                "rate_limit": rate_limit_text(r.rate_limit),
            }
            for r in scope.routes
        ],
        "bindings": {
            name: {
                "scope": b.scope,
                "redefines": b.redefines,
                "executor": b.executor,
                "settings": thaw(b.settings),
                "controls": list(b.controls),
                "capabilities": sorted(b.capabilities),
                "problem": b.problem,
                "flow": b.flow.describe(),
                **({"retry": thaw(b.retry)} if b.retry else {}),
            }
            for name, b in sorted(scope.bindings.items())
        },
        **({"schedules": [thaw(s) for s in scope.schedules]} if scope.schedules else {}),
    }
