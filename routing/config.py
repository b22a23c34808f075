"""Configuration documents: parsing and validation, and the effective configuration.

A document (YAML, see the configuration format design page) declares scopes with named
bindings and ordered routes. :func:`parse_document` validates all of it and raises
:class:`ConfigInvalid` listing every problem with its place in the document
(``scopes[1].routes[0].binding: unknown binding 'triag'``); ``routing.services`` stores a
valid document as a Generation.

:func:`load_configuration` reads a stored Generation into an immutable :class:`Configuration`:
per scope, the routes resolved root to leaf with override slots replaced in place, and the
bindings visible there, a child's redefinition winning (R3).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import yaml

from routing.extension import RouteInfo, freeze
from routing.ingress import kind_of
from routing.models import Generation, GenerationKind, Route, Scope
from routing.registry import HandlerMissing, handler_class, registered_handlers
from worklife.executors import (
    CONTROLS,
    BindingInvalid,
    ExecutorMissing,
    executor_class,
    registered_executors,
    supported_controls,
    validate_binding,
)

POLICIES: tuple[str, ...] = ("queue", "inject", "interrupt", "drop")
FALLBACKS: tuple[str, ...] = ("queue", "drop")
CONTROL_POLICIES: frozenset[str] = frozenset({"inject", "interrupt"})
BINDING_POLICIES: frozenset[str] = frozenset({"queue", "inject", "interrupt"})
SUPPORTED_VERSIONS: tuple[int, ...] = (1,)

MAX_DOCUMENT_BYTES = 1024 * 1024
MAX_NODES = 50_000
_PATH_MAX = Scope._meta.get_field("path").max_length
_NAME_MAX = Route._meta.get_field("slot").max_length
_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
_SCOPE_PATH = re.compile(rf"^{_SEGMENT}(/{_SEGMENT})*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
_LAST_STEP = re.compile(r"(\.[^.\[\]]*|\[\d+\])$")

_DOCUMENT_KEYS = ("version", "scopes")
_SCOPE_KEYS = ("path", "bindings", "routes")
_BINDING_KEYS = ("executor", "settings", "controls")
_ROUTE_KEYS = ("slot", "handler", "params", "binding", "policy", "fallback", "start")


# --- problems ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with a document: where (``scopes[1].routes[0].binding``), what, and
    the line it starts on when known."""

    place: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.place}: {self.message}"


class ConfigInvalid(Exception):
    """A document that cannot be applied; ``problems`` lists everything wrong with it."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


class GenerationNotFound(LookupError):
    """No Generation answers the reference (``3``, ``candidate:12``, or the live one)."""


# --- the parsed document -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParsedBinding:
    """A binding as declared (plain JSON values, ready to store)."""

    name: str
    executor: str
    settings: dict[str, Any]
    controls: tuple[str, ...]
    capabilities: frozenset[str]
    place: str = ""


@dataclass(frozen=True, slots=True)
class ParsedRoute:
    """A route as declared (plain JSON values, ready to store)."""

    slot: str
    handler: str
    params: dict[str, Any]
    binding: str
    policy: str
    fallback: str
    start: bool
    place: str = ""


@dataclass(frozen=True, slots=True)
class ParsedScope:
    """A scope as declared: its own bindings and routes, in document order."""

    path: str
    bindings: tuple[ParsedBinding, ...]
    routes: tuple[ParsedRoute, ...]
    place: str = ""

    @property
    def parent_path(self) -> str | None:
        head, sep, _ = self.path.rpartition("/")
        return head if sep else None


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """A valid document: what :func:`parse_document` returns and the services store."""

    version: int
    scopes: tuple[ParsedScope, ...]
    text: str = ""

    @property
    def digest(self) -> str:
        """SHA-256 of the document text, hex."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


# --- the effective configuration (R3) ------------------------------------------------------


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

    def route(self, slot: str) -> EffectiveRoute | None:
        """The route in effect in ``slot``, if any."""
        return next((route for route in self.routes if route.slot == slot), None)


@dataclass(frozen=True)
class Configuration:
    """One generation's effective configuration, immutable. ``label`` is the generation
    number (``"3"``) or ``"candidate"``."""

    generation_id: int
    label: str
    scopes: Mapping[str, EffectiveScope]

    def scope(self, path: str) -> EffectiveScope | None:
        """The effective scope declared at ``path``, or ``None``."""
        return self.scopes.get(path)

    def scope_or_empty(self, path: str) -> EffectiveScope:
        """The effective scope at ``path``; a scope that left the configuration has no routes
        and no bindings (no route can select its Events)."""
        return self.scopes.get(path) or EffectiveScope(path=path, routes=(), bindings={})


def _binding_state(executor: str, controls: Sequence[str]) -> tuple[frozenset[str], str]:
    """Capabilities and problem of a stored binding, against the executors registered now."""
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


def _resolve(scopes: Iterable[ParsedScope]) -> dict[str, EffectiveScope]:
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
            )
            if replaced is None:
                index[route.slot] = len(routes)
                routes.append(effective)
            else:
                routes[replaced] = effective
        resolved[declared.path] = EffectiveScope(
            path=declared.path, routes=tuple(routes), bindings=MappingProxyType(bindings)
        )
    return resolved


def build_configuration(
    document: ParsedDocument, *, generation_id: int = 0, label: str = "candidate"
) -> Configuration:
    """The effective configuration of a parsed document, without storing it. Everything is
    copied and frozen: changing the document's dicts afterwards changes nothing (R1)."""
    return Configuration(
        generation_id=generation_id, label=label, scopes=MappingProxyType(_resolve(document.scopes))
    )


def load_configuration(generation: Generation) -> Configuration:
    """Read a stored generation into its effective configuration (three queries)."""
    rows = Scope.objects.filter(generation=generation).prefetch_related("bindings", "routes")
    declared = [
        ParsedScope(
            path=row.path,
            bindings=tuple(
                ParsedBinding(
                    name=b.name,
                    executor=b.executor,
                    settings=b.settings or {},
                    controls=tuple(b.controls or ()),
                    capabilities=frozenset(),
                )
                for b in row.bindings.all()
            ),
            routes=tuple(
                ParsedRoute(
                    slot=r.slot,
                    handler=r.handler,
                    params=r.params or {},
                    binding=r.binding,
                    policy=r.policy,
                    fallback=r.fallback,
                    start=r.start,
                )
                for r in sorted(row.routes.all(), key=lambda r: r.position)
            ),
        )
        for row in rows
    ]
    return Configuration(
        generation_id=generation.pk, label=generation.label, scopes=MappingProxyType(_resolve(declared))
    )


def live_generation() -> Generation | None:
    """The newest applied generation (the live one), or ``None`` before the first apply."""
    return Generation.objects.filter(kind=GenerationKind.APPLIED).order_by("-number").first()


def find_generation(reference: str | None = None) -> Generation:
    """The generation ``reference`` names: ``None`` for the live one, ``"3"`` for applied
    generation 3, ``"candidate:12"`` for candidate 12. Raises :class:`GenerationNotFound`."""
    if reference is None or reference == "":
        generation = live_generation()
        if generation is None:
            raise GenerationNotFound("no configuration has been applied yet")
        return generation
    kind, sep, ident = reference.partition(":")
    if sep and kind == "candidate" and ident.isdigit():
        generation = Generation.objects.filter(kind=GenerationKind.CANDIDATE, pk=int(ident)).first()
        if generation is None:
            raise GenerationNotFound(f"there is no candidate {ident}")
        return generation
    if not sep and reference.isdigit():
        generation = Generation.objects.filter(kind=GenerationKind.APPLIED, number=int(reference)).first()
        if generation is None:
            raise GenerationNotFound(f"there is no applied generation {reference}")
        return generation
    raise GenerationNotFound(f"{reference!r} is not a generation number or candidate:ID")


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
            }
            for name, b in sorted(scope.bindings.items())
        },
    }


# --- reading YAML with places ---------------------------------------------------------------


class _TooLarge(Exception):
    """The document is over the size or node limit: reading stops at once."""


_YAML = "tag:yaml.org,2002:"
_MAP_TAG = f"{_YAML}map"
_SEQ_TAG = f"{_YAML}seq"
_MERGE_TAG = f"{_YAML}merge"
_TIMESTAMP_TAG = f"{_YAML}timestamp"


def _shown_tag(tag: str) -> str:
    """A tag as written in the document (``!!binary``, not ``tag:yaml.org,2002:binary``)."""
    return f"!!{tag.removeprefix(_YAML)}" if tag.startswith(_YAML) else tag


def _text_problem(value: str) -> str | None:
    """Why a string cannot be stored as every backend stores acceptance's strings (NUL, a
    lone surrogate), or ``None``: the document is held to what acceptance refuses."""
    if "\x00" in value:
        return "NUL characters (\\u0000) are not allowed"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"invalid Unicode (a lone surrogate at character {exc.start})"
    return None


class _Reader:
    """Builds plain Python values from YAML nodes, recording the line of every place and
    refusing duplicate keys, non-string keys, tags outside the core schema and values JSON
    cannot hold (or that acceptance would refuse: NUL, lone surrogates)."""

    _PLAIN_TAGS = frozenset({f"{_YAML}{name}" for name in ("str", "int", "float", "bool", "null")})

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        self.lines: dict[str, int] = {}
        self.nodes = 0

    def load(self, text: str) -> Any:
        """The document's data, or ``None`` after recording why it cannot be read."""
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                self.problems.append(ConfigProblem("document", "the document is empty"))
                return None
            return self._build(loader, node, "")
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            what = " ".join(str(exc.problem or exc.context or exc).split())
            self.problems.append(ConfigProblem("document", f"not valid YAML: {what}{where}", line))
        except yaml.YAMLError as exc:
            self.problems.append(ConfigProblem("document", f"not valid YAML: {' '.join(str(exc).split())}"))
        except _TooLarge:
            self.problems.append(
                ConfigProblem("document", f"too many YAML nodes (more than {MAX_NODES}, counting aliases)")
            )
        except RecursionError:
            self.problems.append(ConfigProblem("document", "the document is nested too deeply"))
        finally:
            loader.dispose()
        return None

    def _problem(self, place: str, message: str, line: int | None) -> None:
        self.problems.append(ConfigProblem(place or "document", message, line))

    def _build(self, loader: yaml.SafeLoader, node: yaml.Node, place: str) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _TooLarge
        line = node.start_mark.line + 1
        self.lines.setdefault(place, line)
        if not self._tag_allowed(node, place):
            return None
        if isinstance(node, yaml.MappingNode):
            if not self._merges_allowed(node, place, set()):
                return None
            loader.flatten_mapping(node)
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key_line = key_node.start_mark.line + 1
                if not self._tag_allowed(key_node, place):
                    continue
                key = loader.construct_object(key_node) if isinstance(key_node, yaml.ScalarNode) else None
                if not isinstance(key, str):
                    shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else "a collection"
                    self._problem(place, f"key {shown!r} must be a string (quote it)", key_line)
                    continue
                why = _text_problem(key)
                if why is not None:
                    shown = key.encode("utf-8", "backslashreplace").decode("utf-8")
                    self._problem(place, f"bad key {shown!r}: {why}", key_line)
                    continue
                child = f"{place}.{key}" if place else key
                if key in result:
                    first = self.lines.get(child)
                    self._problem(child, f"duplicate key {key!r} (first on line {first})", key_line)
                    continue
                self.lines[child] = key_line
                result[key] = self._build(loader, value_node, child)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self._build(loader, item, f"{place}[{index}]") for index, item in enumerate(node.value)]
        if node.tag == _TIMESTAMP_TAG:
            value = node.value  # keep dates as written: JSON has no date type
        else:
            value = loader.construct_object(node)
        if isinstance(value, float) and not math.isfinite(value):
            self._problem(place, f"{node.value!r} is not a finite number", line)
            return None
        if isinstance(value, str) and (why := _text_problem(value)) is not None:
            self._problem(place, why, line)
            return None
        return value

    def _tag_allowed(self, node: yaml.Node, place: str) -> bool:
        """Whether the node's tag is in the core schema for its kind; records the problem
        with the node's line when not (``!!python/object/apply:…``, ``!!set``, ``!custom``)."""
        if isinstance(node, yaml.MappingNode):
            allowed = node.tag == _MAP_TAG
        elif isinstance(node, yaml.SequenceNode):
            allowed = node.tag == _SEQ_TAG
        else:
            allowed = node.tag in self._PLAIN_TAGS or node.tag == _TIMESTAMP_TAG
        if not allowed:
            self._problem(
                place,
                f"unsupported YAML value: the tag {_shown_tag(node.tag)!r} is not in the core schema; "
                "use strings, numbers, booleans, null, lists and mappings",
                node.start_mark.line + 1,
            )
        return allowed

    def _merges_allowed(self, node: yaml.MappingNode, place: str, seen: set[int]) -> bool:
        """Check the tags of what ``<<`` merge keys bring in before they are flattened into
        ``node`` (their own tags would be lost there)."""
        if id(node) in seen:
            return True  # a recursive merge: flatten_mapping reports it
        seen.add(id(node))
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                continue
            items = [value_node]
            if isinstance(value_node, yaml.SequenceNode):
                items.extend(value_node.value)
            for item in items:
                if not self._tag_allowed(item, place):
                    return False
                if isinstance(item, yaml.MappingNode) and not self._merges_allowed(item, place, seen):
                    return False
        return True


# --- validation ----------------------------------------------------------------------------


def _kind(value: Any) -> str:
    """What kind of YAML value ``value`` is, for an error message."""
    return kind_of(value, sequence="a list", mapping="a mapping")


class _Validator:
    def __init__(self, text: str) -> None:
        self.text = text
        self.problems: list[ConfigProblem] = []
        self.reader = _Reader(self.problems)
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
        self.effective(scopes)
        if self.problems:
            # In document order, as an editor shows them (stable: same line keeps its order).
            raise ConfigInvalid(sorted(self.problems, key=lambda p: (p.line is None, p.line or 0)))
        return ParsedDocument(version=version, scopes=tuple(scopes), text=self.text)

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
                if not _SCOPE_PATH.match(path) or len(path) > _PATH_MAX:
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
            if path is not None:
                parsed.append(ParsedScope(path=path, bindings=bindings, routes=routes, place=place))
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
        )

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
        for effective in _resolve(scopes).values():
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
