"""Validation: a read document into a :class:`~routing.config.document.ParsedDocument`, or
:class:`~routing.config.problems.ConfigInvalid` listing every problem with its place
(``scopes[1].routes[0].binding: unknown binding 'triag'``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from causal.checks import kind_of
from routing.config.document import ParsedBinding, ParsedDocument, ParsedRoute, ParsedScope
from routing.config.effective import (
    resolve_scopes,
)
from routing.config.problems import ConfigInvalid, ConfigProblem
from routing.config.reader import MAX_DOCUMENT_BYTES, Reader
from routing.config.receivers import ReceiverSpec, receiver_parse
from routing.config.schedules import schedule_problems
from routing.handlers.registry import HandlerMissing, handler_class, registered_handlers
from routing.models import Route, Scope
from worklife.executors import (
    CONTROLS,
    BindingInvalid,
    ExecutorMissing,
    executor_class,
    registered_executors,
    validate_binding,
)
from worklife.flow import (
    FLOW_KEYS,
    ROUTE_FLOW_KEYS,
    flow_declared,
    flow_parse,
    priority_parse,
    rate_limit_parse,
)
from worklife.retry import retry_policy_problems

POLICIES: tuple[str, ...] = ("queue", "inject", "interrupt", "drop")
FALLBACKS: tuple[str, ...] = ("queue", "drop")
CONTROL_POLICIES: frozenset[str] = frozenset({"inject", "interrupt"})
BINDING_POLICIES: frozenset[str] = frozenset({"queue", "inject", "interrupt"})
SUPPORTED_VERSIONS: tuple[int, ...] = (1,)

_PATH_MAX = Scope._meta.get_field("path").max_length
_NAME_MAX = Route._meta.get_field("slot").max_length
_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
SCOPE_PATH_PATTERN = rf"^{_SEGMENT}(/{_SEGMENT})*$"
"""How a scope path is written (the OpenAPI document says it with the same pattern)."""
_SCOPE_PATH = re.compile(SCOPE_PATH_PATTERN)
# A binding's or a route's name: letters and digits, then also ``_ . : -``.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
_NAME = re.compile(NAME_PATTERN)
_LAST_STEP = re.compile(r"(\.[^.\[\]]*|\[\d+\])$")

_DOCUMENT_KEYS = ("version", "default_scope", "scopes", "receivers")
_SCOPE_KEYS = ("path", "bindings", "routes", "schedules")
_BINDING_KEYS = ("executor", "settings", "controls", "retry", *FLOW_KEYS)
_ROUTE_KEYS = ("slot", "handler", "params", "binding", "policy", "fallback", "start", *ROUTE_FLOW_KEYS)


def is_scope_path(path: str) -> bool:
    """Whether ``path`` is written as a scope path may be (``acme/web``): segments of letters,
    digits, '.', '_' or '-' joined by single '/', at most 255 characters."""
    return bool(_SCOPE_PATH.match(path)) and len(path) <= _PATH_MAX


def _kind(value: Any) -> str:
    """What kind of YAML value ``value`` is, for an error message."""
    return kind_of(value, sequence="a list", mapping="a mapping")


class _Validator:
    def __init__(self, text: str) -> None:
        self.text = text
        self.problems: list[ConfigProblem] = []
        self.reader = Reader(self.problems)
        self.handlers = registered_handlers()
        self.executors = registered_executors()
        self.invalid_bindings: set[tuple[str, str]] = set()

    # helpers

    def problem(self, place: str, message: str) -> None:
        line = None
        probe = place
        while probe:
            if probe in self.reader.lines:
                line = self.reader.lines[probe]
                break
            shorter = _LAST_STEP.sub("", probe)
            if shorter == probe:
                break
            probe = shorter
        self.problems.append(ConfigProblem(place, message, line))

    def mapping(self, value: Any, place: str, what: str) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.problem(place, f"expected {what} (a mapping), got {_kind(value)}")
            return None
        return value

    def keys(self, value: dict[str, Any], place: str, allowed: Sequence[str]) -> None:
        for key in value:
            if key not in allowed:
                child = f"{place}.{key}" if place else key
                self.problem(child, f"unknown key {key!r} (expected one of: {', '.join(allowed)})")

    def string(self, value: Any, place: str, *, required: bool = False, default: str = "") -> str | None:
        if value is None:
            if required:
                self.problem(place, "required")
                return None
            return default
        if not isinstance(value, str):
            self.problem(place, f"expected a string, got {_kind(value)}")
            return None
        return value

    def name(self, value: Any, place: str, what: str) -> str | None:
        text = self.string(value, place, required=True)
        if text is None:
            return None
        if not _NAME.match(text) or len(text) > _NAME_MAX:
            self.problem(
                place,
                f"bad {what} {text!r}: use letters, digits, '.', '_', ':' or '-', starting with a letter "
                f"or digit, at most {_NAME_MAX} characters",
            )
            return None
        return text

    # the document

    def run(self) -> ParsedDocument:
        try:
            size = len(self.text.encode("utf-8"))
        except UnicodeEncodeError as exc:
            line = self.text.count("\n", 0, exc.start) + 1
            raise ConfigInvalid(
                [ConfigProblem("document", f"invalid Unicode: a lone surrogate on line {line}", line)]
            ) from None
        if size > MAX_DOCUMENT_BYTES:
            raise ConfigInvalid(
                [ConfigProblem("document", f"the document is {size} bytes, more than {MAX_DOCUMENT_BYTES}")]
            )
        data = self.reader.load(self.text)
        if self.problems:
            raise ConfigInvalid(self.problems)
        root = self.mapping(data, "document", "the document")
        if root is None:
            raise ConfigInvalid(self.problems)
        self.keys(root, "", _DOCUMENT_KEYS)
        version = root.get("version")
        if version is None:
            self.problem("version", "required: write version: 1")
        elif type(version) is not int or version not in SUPPORTED_VERSIONS:
            self.problem("version", f"unsupported version {version!r} (supported: 1)")
        raw_scopes = root.get("scopes")
        scopes: list[ParsedScope] = []
        if raw_scopes is None:
            self.problem("scopes", "required: a list of scopes")
        elif not isinstance(raw_scopes, list):
            self.problem("scopes", f"expected a list of scopes, got {_kind(raw_scopes)}")
        elif not raw_scopes:
            self.problem("scopes", "declare at least one scope")
        else:
            scopes = self.scopes(raw_scopes)
        default_scope = self.default_scope(root.get("default_scope"), scopes)
        self.effective(scopes)
        receivers = self.receivers(root.get("receivers"), {scope.path for scope in scopes})
        if self.problems:
            # In document order, as an editor shows them (stable: same line keeps its order).
            raise ConfigInvalid(sorted(self.problems, key=lambda p: (p.line is None, p.line or 0)))
        return ParsedDocument(
            version=version,
            scopes=tuple(scopes),
            text=self.text,
            default_scope=default_scope,
            receivers=receivers,
        )

    def default_scope(self, value: Any, scopes: list[ParsedScope]) -> str:
        """The document's ``default_scope``: a scope it declares, or "" when it names none."""
        if value is None:
            return ""
        path = self.string(value, "default_scope")
        if path is None:
            return ""
        declared = [scope.path for scope in scopes]
        if path not in declared:
            listed = ", ".join(repr(p) for p in declared[:10]) + (", …" if len(declared) > 10 else "")
            self.problem(
                "default_scope",
                f"unknown scope {path!r}: the default scope must be one this document declares ({listed})",
            )
            return ""
        return path

    def receivers(self, raw: Any, scopes: set[str]) -> tuple[ReceiverSpec, ...]:
        if raw is None:
            return ()
        table = self.mapping(raw, "receivers", "receivers by name")
        if table is None:
            return ()
        parsed = []
        for name, declared in table.items():
            place = f"receivers.{name}"
            receiver, problems = receiver_parse(name, declared, place)
            for where, message in problems:
                self.problem(where, message)
            scope = declared.get("scope") if isinstance(declared, dict) else None
            if isinstance(scope, str) and scope and scopes and scope not in scopes:
                self.problem(
                    f"{place}.scope", f"unknown scope {scope!r} (scopes here: {', '.join(sorted(scopes))})"
                )
                continue
            if receiver is not None:
                parsed.append(receiver)
        return tuple(parsed)

    def scopes(self, raw_scopes: list[Any]) -> list[ParsedScope]:
        parsed: list[ParsedScope] = []
        first_place: dict[str, str] = {}
        for index, raw in enumerate(raw_scopes):
            place = f"scopes[{index}]"
            scope = self.mapping(raw, place, "a scope")
            if scope is None:
                continue
            self.keys(scope, place, _SCOPE_KEYS)
            path = self.string(scope.get("path"), f"{place}.path", required=True)
            if path is not None:
                if not is_scope_path(path):
                    self.problem(
                        f"{place}.path",
                        f"bad scope path {path!r}: segments of letters, digits, '.', '_' or '-' (each "
                        f"starting with a letter or digit) joined by single '/', at most {_PATH_MAX} characters",
                    )
                    path = None
                elif path in first_place:
                    self.problem(f"{place}.path", f"duplicate scope {path!r} (also {first_place[path]})")
                    path = None
                else:
                    first_place[path] = place
            bindings = self.bindings(scope.get("bindings"), f"{place}.bindings", path or "")
            routes = self.routes(scope.get("routes"), f"{place}.routes")
            schedules = self.schedules(scope.get("schedules"), f"{place}.schedules")
            if path is not None:
                parsed.append(
                    ParsedScope(path=path, bindings=bindings, routes=routes, place=place, schedules=schedules)
                )
        for scope in parsed:
            parent = scope.parent_path
            if parent is not None and parent not in first_place:
                self.problem(
                    f"{scope.place}.path",
                    f"scope {scope.path!r} needs its parent scope {parent!r} declared in the same document",
                )
        return parsed

    def bindings(self, raw: Any, place: str, scope_path: str) -> tuple[ParsedBinding, ...]:
        if raw is None:
            return ()
        table = self.mapping(raw, place, "bindings by name")
        if table is None:
            return ()
        parsed = []
        for name, raw_binding in table.items():
            binding_place = f"{place}.{name}"
            if self.name(name, binding_place, "binding name") is None:
                self.invalid_bindings.add((scope_path, name))
                continue
            binding = self.binding(name, raw_binding, binding_place)
            if binding is None:
                self.invalid_bindings.add((scope_path, name))
            else:
                parsed.append(binding)
        return tuple(parsed)

    def binding(self, name: str, raw: Any, place: str) -> ParsedBinding | None:
        if raw is None:
            raw = {}  # "inbox:" alone declares a queue-only binding
        binding = self.mapping(raw, place, "a binding")
        if binding is None:
            return None
        before = len(self.problems)
        self.keys(binding, place, _BINDING_KEYS)
        for where, message in flow_parse(binding, place)[1]:
            self.problem(where, message)
        executor = self.string(binding.get("executor"), f"{place}.executor")
        settings = binding.get("settings")
        if settings is None:
            settings = {}
        elif not isinstance(settings, dict):
            self.problem(f"{place}.settings", f"expected a mapping, got {_kind(settings)}")
            settings = None
        controls = binding.get("controls")
        if controls is None:
            controls = []
        elif not isinstance(controls, list) or not all(isinstance(c, str) for c in controls):
            self.problem(
                f"{place}.controls",
                f"expected a list of controls ({', '.join(CONTROLS)}), got {_kind(controls)}",
            )
            controls = None
        retry = binding.get("retry")
        if retry is not None:
            for sub, message in retry_policy_problems(retry):
                self.problem(f"{place}.retry.{sub}" if sub else f"{place}.retry", message)
        if executor is None or settings is None or controls is None:
            return None
        if executor and executor not in self.executors:
            registered = ", ".join(sorted(self.executors)) or "none"
            self.problem(f"{place}.executor", f"unknown executor {executor!r} (registered: {registered})")
            return None
        cls = None
        if executor:
            try:
                cls = executor_class(executor)
            except ExecutorMissing as exc:
                self.problem(f"{place}.executor", str(exc))
                return None
        try:
            capabilities = validate_binding(name, executor, cls, settings, controls)
        except BindingInvalid as exc:
            for sub, message in exc.problems:
                self.problem(f"{place}.{sub}", message)
            return None
        if len(self.problems) != before:
            return None
        return ParsedBinding(
            name=name,
            executor=executor,
            settings=settings,
            controls=tuple(controls),
            capabilities=capabilities,
            place=place,
            flow=flow_declared(binding),
            retry=retry or None,
        )

    def schedules(self, raw: Any, place: str) -> tuple[dict[str, Any], ...]:
        """A scope's schedules by name, each stored with its name (``routing.config.schedules``)."""
        if raw is None:
            return ()
        table = self.mapping(raw, place, "schedules by name")
        if table is None:
            return ()
        parsed = []
        for name, declared in table.items():
            schedule_place = f"{place}.{name}"
            if self.name(name, schedule_place, "schedule name") is None:
                continue
            problems = schedule_problems(declared)
            for sub, message in problems:
                self.problem(f"{schedule_place}.{sub}" if sub else schedule_place, message)
            if not problems:
                parsed.append({"name": name, **declared})
        return tuple(parsed)

    def routes(self, raw: Any, place: str) -> tuple[ParsedRoute, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.problem(place, f"expected a list of routes, got {_kind(raw)}")
            return ()
        parsed: list[ParsedRoute] = []
        slots: dict[str, str] = {}
        for index, raw_route in enumerate(raw):
            route_place = f"{place}[{index}]"
            route = self.route(raw_route, route_place)
            if route is None:
                continue
            if route.slot in slots:
                self.problem(
                    f"{route_place}.slot",
                    f"duplicate slot {route.slot!r} in this scope (also {slots[route.slot]})",
                )
                continue
            slots[route.slot] = route_place
            parsed.append(route)
        return tuple(parsed)

    def route(self, raw: Any, place: str) -> ParsedRoute | None:
        route = self.mapping(raw, place, "a route")
        if route is None:
            return None
        self.keys(route, place, _ROUTE_KEYS)
        slot = self.name(route.get("slot"), f"{place}.slot", "slot")
        handler = self.string(route.get("handler"), f"{place}.handler", required=True)
        params = route.get("params")
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            self.problem(
                f"{place}.params", f"expected a mapping of the handler's params, got {_kind(params)}"
            )
            params = None
        binding = self.string(route.get("binding"), f"{place}.binding")
        policy = self.string(route.get("policy"), f"{place}.policy", default="queue")
        if policy is not None and policy not in POLICIES:
            self.problem(
                f"{place}.policy", f"unknown policy {policy!r} (expected one of: {', '.join(POLICIES)})"
            )
        fallback = self.string(route.get("fallback"), f"{place}.fallback")
        if fallback and fallback not in FALLBACKS:
            self.problem(
                f"{place}.fallback",
                f"unknown fallback {fallback!r} (expected one of: {', '.join(FALLBACKS)})",
            )
        start = route.get("start", True)
        if not isinstance(start, bool):
            self.problem(f"{place}.start", f"expected true or false, got {_kind(start)}")
        priority, problem = priority_parse(route.get("priority", 0))
        if problem:
            self.problem(f"{place}.priority", problem)
        rate_limit = route.get("rate_limit")
        for where, message in rate_limit_parse(rate_limit, f"{place}.rate_limit")[1]:
            self.problem(where, message)
        if policy in BINDING_POLICIES and not binding:
            self.problem(f"{place}.binding", f"policy {policy!r} needs a binding")
        if handler is not None:
            self.handler(handler, params, place)
        if slot is None:
            return None
        # A route with problems is still returned, so the cross-scope checks can report its
        # binding too; any problem refuses the whole document anyway.
        return ParsedRoute(
            slot=slot,
            handler=handler or "",
            params=params or {},
            binding=binding or "",
            policy=policy or "queue",
            fallback=fallback or "",
            start=start if isinstance(start, bool) else True,
            place=place,
            priority=priority,
            rate_limit=rate_limit if isinstance(rate_limit, dict) else None,
        )

    def handler(self, name: str, params: dict[str, Any] | None, place: str) -> None:
        if name not in self.handlers:
            registered = ", ".join(sorted(self.handlers)) or "none"
            self.problem(f"{place}.handler", f"unknown handler {name!r} (registered: {registered})")
            return
        try:
            cls = handler_class(name)
        except HandlerMissing as exc:
            self.problem(f"{place}.handler", str(exc))
            return
        check = getattr(cls, "validate_params", None)
        if params is None or not callable(check):
            return
        try:
            found = list(check(params))
        except (TypeError, ValueError) as exc:
            self.problem(f"{place}.params", f"handler {name!r} cannot check these params: {exc}")
            return
        for sub, message in found:
            self.problem(f"{place}.params.{sub}" if sub else f"{place}.params", message)

    # cross-scope checks (R3, R34)

    def _declared_invalid(self, path: str, name: str) -> bool:
        probe: str | None = path
        while probe is not None:
            if (probe, name) in self.invalid_bindings:
                return True
            probe = probe.rpartition("/")[0] or None
        return False

    def effective(self, scopes: list[ParsedScope]) -> None:
        places = {(scope.path, route.slot): route.place for scope in scopes for route in scope.routes}
        seen: set[str] = set()
        for effective in resolve_scopes(scopes).values():
            for route in effective.routes:
                if not route.binding:
                    continue
                place = f"{places[(route.scope, route.slot)]}.binding"
                where = (
                    ""
                    if effective.path == route.scope
                    else f"in scope {effective.path!r}, which inherits this route: "
                )
                binding = effective.bindings.get(route.binding)
                if binding is None:
                    if self._declared_invalid(effective.path, route.binding):
                        continue  # already reported where it is declared
                    visible = ", ".join(sorted(effective.bindings)) or "none"
                    message = f"{where}unknown binding {route.binding!r} (bindings here: {visible})"
                elif (
                    route.policy in CONTROL_POLICIES
                    and route.policy not in binding.capabilities
                    and not route.fallback
                ):
                    if not binding.executor:
                        why = "is queue-only"
                    elif route.policy not in binding.controls:
                        why = f"does not claim {route.policy} in its controls"
                    else:
                        why = f"cannot {route.policy}"
                    message = (
                        f"{where}binding {route.binding!r} (declared in {binding.scope!r}) {why}, so policy "
                        f"{route.policy!r} needs an explicit fallback (fallback: queue or fallback: drop)"
                    )
                else:
                    continue
                # One binding problem per route: the declaring scope's (resolved first), else
                # the first inheriting scope's.
                if place not in seen:
                    seen.add(place)
                    self.problem(place, message)


def parse_document(text: str) -> ParsedDocument:
    """Parse and validate a YAML configuration document.

    Raises :class:`ConfigInvalid` listing every problem with its place: unknown keys, wrong
    types, bad scope paths, a child scope without its parent, unknown handlers, executors or
    bindings, bad policies or fallbacks, duplicate slots, a claimed control the executor
    cannot perform (R2), a control policy without support or fallback in the declaring scope
    or any scope inheriting the route (R3, R34), and the handler's own params checks.
    """
    if not isinstance(text, str):
        raise ConfigInvalid([ConfigProblem("document", f"expected text, got {type(text).__name__}")])
    return _Validator(text).run()
