"""Built-in route handlers: ``match``, the declarative one.

``routing.handlers.Match`` (registered as ``match``) decides from its route's ``params``::

    type: "github.pull_request.*"        # glob on the Event type (required)
    source: "github*"                     # glob on the source (optional)
    subject: "repo/*"                     # glob on the subject (optional)
    where:                                # all must hold (optional)
      - {field: data.action, in: [opened, synchronize]}
      - {field: data.draft, equals: false}
      - {field: data.labels, exists: true}
      - {field: data.title, matches: "^WIP"}   # an RE2 regular expression, searched
    keys: ["pr:{data.repository}#{data.number}"]   # correlation key templates (optional)

Fields are dotted paths into the Event: ``type``, ``source``, ``subject``, ``scope``, ``id``,
``data`` and ``data.<key>.<key>…`` (a numeric segment indexes a list). Globs are
case-sensitive shell patterns (``*``, ``?``, ``[abc]``) over the whole value. ``equals`` and
``in`` compare JSON values strictly (``false`` is not ``0``). ``matches`` searches the string
value (anchor with ``^``/``$``); a non-string value does not match. Patterns run on RE2, a
linear-time engine, so no pattern can backtrack catastrophically (``^(a+)+$`` takes time in
proportion to the value); the few Python features RE2 lacks (backreferences, lookaround) are
refused when the configuration is validated. In a key template ``{field}``
is replaced by the field's value; ``{{`` and ``}}`` are literal braces. A field a key needs that
is missing (or null, or not a scalar) makes the route skip with a reason naming the field.

Every skip reason says which condition failed; operators read it in refusals (R28). Params
are compiled once per handler and params object (and, across objects, per distinct params),
and ``match`` has no side effects: traces call it too (R40).
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from threading import Lock
from typing import Any

import re2

from infra.frozen import frozen
from routing.extension import Clock, EventSnapshot, Invalid, RouteDecision, RouteInfo, Sample, skip
from routing.handlers.samples import route_sample
from routing.handlers.values import (
    MISSING,
    RE2_OPTIONS,
    FieldPath,
    bare,
    parse_field,
    same,
    show,
    thaw,
)

MAX_KEY_LENGTH = 512  # worklife.models.CorrelationKey.key
_CACHE_LIMIT = 1024

_GLOB_KEYS = ("type", "source", "subject")
_PARAM_KEYS = ("type", "source", "subject", "where", "keys")
_OPERATORS = ("equals", "in", "exists", "matches")


class MatchParamsError(ValueError):
    """The route's ``match`` params are invalid; ``problems`` lists ``(place, message)``."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(f"{place}: {message}" for place, message in self.problems))


# --- compiled params ---------------------------------------------------------------------

Check = Callable[[EventSnapshot], str | None]


def _glob_check(name: str, glob: str) -> Check:
    def refusal(value: str) -> str:
        return f"{name} {value or "''"} does not match {glob}"

    head = glob[:-1] if glob.endswith("*") else glob
    if any(c in head for c in "*?["):
        fullmatch = re.compile(fnmatch.translate(glob), re.DOTALL).match  # anchored at both ends

        def check(event: EventSnapshot) -> str | None:
            value = getattr(event, name)
            return None if fullmatch(value) is not None else refusal(value)

    # The common globs, "deploy.*" and "ops.heartbeat": a prefix or the whole text, the
    # pattern's answer without running it.
    elif head is glob:

        def check(event: EventSnapshot) -> str | None:
            value = getattr(event, name)
            return None if value == glob else refusal(value)

    else:

        def check(event: EventSnapshot) -> str | None:
            value = getattr(event, name)
            return None if value.startswith(head) else refusal(value)

    return check


# Refusals are the most common answer (an Event of one kind is refused by every route for
# another kind, with the same reason each time): one RouteDecision per reason, shared (records
# are frozen), instead of one per Event and route.
_refusal = functools.lru_cache(maxsize=1024)(skip)


def _predicate_check(path: FieldPath, operator: str, operand: Any) -> Check:
    field = path.text
    get = path.get
    if operator == "equals":

        def check(event: EventSnapshot) -> str | None:
            value = get(event)
            if value is MISSING:
                return f"{field} is missing, expected {show(operand)}"
            return None if same(value, operand) else f"{field} is {show(value)}, not {show(operand)}"

    elif operator == "in":
        shown = "[" + ", ".join(bare(item) for item in operand) + "]"

        def check(event: EventSnapshot) -> str | None:
            value = get(event)
            if value is MISSING:
                return f"{field} is missing, expected one of {shown}"
            if any(same(value, item) for item in operand):
                return None
            return f"{field} is {show(value)}, not one of {shown}"

    elif operator == "exists":
        wanted = bool(operand)

        def check(event: EventSnapshot) -> str | None:
            value = get(event)
            if (value is not MISSING) == wanted:
                return None
            return f"{field} is missing" if wanted else f"{field} is present ({show(value)}), expected absent"

    else:  # matches
        search = re2.compile(operand, options=RE2_OPTIONS).search

        def check(event: EventSnapshot) -> str | None:
            value = get(event)
            if value is MISSING:
                return f"{field} is missing, expected to match /{operand}/"
            if not isinstance(value, str):
                return f"{field} is {show(value)}, not a string matching /{operand}/"
            return None if search(value) else f"{field} is {show(value)}, which does not match /{operand}/"

    return check


def _pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be a ``matches`` condition, or ``None``: it must be a valid
    regular expression that RE2, the linear-time engine it runs on, accepts."""
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"invalid regular expression {pattern!r}: {exc}"
    try:
        re2.compile(pattern, options=RE2_OPTIONS)
    except re2.error as exc:
        why = exc.args[0] if exc.args else exc
        why = why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)
        return (
            f"regular expression {pattern!r} is not supported by RE2, the linear-time engine "
            f"matches runs on (no backreferences or lookaround): {why}"
        )
    except UnicodeError as exc:
        return f"invalid regular expression {pattern!r}: {exc}"
    return None


@frozen
class KeyTemplate:
    """A compiled correlation key template: literal text and fields, in order."""

    text: str
    parts: tuple[str | FieldPath, ...]

    def render(self, event: EventSnapshot) -> tuple[str | None, str]:
        """``(key, "")`` or ``(None, reason)`` when a field the key needs is unusable."""
        out = []
        for part in self.parts:
            if type(part) is not FieldPath:  # literal text
                out.append(part)
                continue
            value = part.get(event)
            # Decoded JSON by exact type first: the abstract checks cost more per value.
            kind = type(value)
            if kind is str and value:
                out.append(value)
            elif kind is str:
                # An absent subject reads as "": "audit:{subject}" would render "audit:", one key
                # every such Event shares, so one Work would own them all. No key: the route declines.
                return None, f"key {self.text} needs {part.text}, which is empty"
            elif kind is int or kind is float:
                out.append(str(value))
            elif value is MISSING:
                return None, f"key {self.text} needs {part.text}, which is missing"
            elif value is None:
                return None, f"key {self.text} needs {part.text}, which is null"
            elif isinstance(value, bool):
                out.append("true" if value else "false")
            elif isinstance(value, str | int | float):
                out.append(str(value))
            else:
                return None, f"key {self.text} needs {part.text}, which is {show(value)}, not a scalar"
        return "".join(out), ""


def parse_key_template(text: Any) -> KeyTemplate:
    """Compile a key template like ``"pr:{data.repository}#{data.number}"``; raises
    ``ValueError`` saying what is wrong."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"expected a key template string, got {show(text)}")
    parts: list[str | FieldPath] = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(
            f"bad key template {text!r}: {exc} (write {{{{ and }}}} for literal braces)"
        ) from None
    for literal, field_name, format_spec, conversion in parsed:
        if literal:
            parts.append(literal)
        if field_name is None:
            continue
        if conversion or format_spec:
            raise ValueError(f"bad key template {text!r}: {{{field_name}}} takes no '!' or ':' suffix")
        if not field_name:
            raise ValueError(f"bad key template {text!r}: empty {{}}; name a field like {{data.number}}")
        try:
            parts.append(parse_field(field_name))
        except ValueError as exc:
            raise ValueError(f"bad key template {text!r}: {exc}") from None
    return KeyTemplate(text=text, parts=tuple(parts))


@frozen
class CompiledMatch:
    """``match`` params compiled once: the checks in order and the key templates."""

    type_glob: str
    checks: tuple[Check, ...]
    keys: tuple[KeyTemplate, ...]
    # For samples: the globs and predicates as written.
    globs: tuple[tuple[str, str], ...]
    predicates: tuple[tuple[FieldPath, str, Any], ...]

    def decide(self, event: EventSnapshot) -> RouteDecision:
        """Match ``event``: the first failing condition's reason, or the keys it attaches."""
        for check in self.checks:
            reason = check(event)
            if reason is not None:
                return _refusal(reason)
        keys = []
        for template in self.keys:
            key, reason = template.render(event)
            if key is None:
                return _refusal(reason)
            if len(key) > MAX_KEY_LENGTH:
                raise Invalid(
                    f"key {template.text} renders to {len(key)} characters (at most {MAX_KEY_LENGTH})"
                )
            keys.append(key)
        # Positional (matched, reason, keys): one a matched Event.
        return RouteDecision(True, f"type {event.type} matches {self.type_glob}", tuple(keys))


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def compile_params(params: Any) -> CompiledMatch:
    """Validate and compile ``match`` params; raises :class:`MatchParamsError` listing every
    problem with its place inside params (``where[1].matches``)."""
    problems: list[tuple[str, str]] = []
    if not isinstance(params, Mapping):
        raise MatchParamsError([("", f"expected a mapping of match params, got {show(params)}")])
    for key in params:
        if key not in _PARAM_KEYS:
            problems.append((str(key), f"unknown key {key!r} (expected one of: {', '.join(_PARAM_KEYS)})"))
    checks: list[Check] = []
    globs: list[tuple[str, str]] = []
    for name in _GLOB_KEYS:
        glob = params.get(name)
        if glob is None:
            if name == "type":
                problems.append(("type", "required: a glob on the Event type, like 'github.pull_request.*'"))
            continue
        if not isinstance(glob, str) or not glob:
            problems.append((name, f"expected a non-empty glob string, got {show(glob)}"))
            continue
        globs.append((name, glob))
        if glob != "*":  # "*" matches every value: no check, no cost
            checks.append(_glob_check(name, glob))

    predicates: list[tuple[FieldPath, str, Any]] = []
    where = params.get("where", ())
    if not _is_list(where):
        problems.append(("where", f"expected a list of conditions, got {show(where)}"))
        where = ()
    for index, predicate in enumerate(where):
        place = f"where[{index}]"
        if not isinstance(predicate, Mapping):
            problems.append(
                (
                    place,
                    f"expected a mapping like {{field: data.action, equals: opened}}, got {show(predicate)}",
                )
            )
            continue
        unknown = [k for k in predicate if k != "field" and k not in _OPERATORS]
        for key in unknown:
            problems.append(
                (
                    f"{place}.{key}",
                    f"unknown key {key!r} (expected field and one of: {', '.join(_OPERATORS)})",
                )
            )
        try:
            path = parse_field(predicate.get("field"))
        except ValueError as exc:
            problems.append((f"{place}.field", str(exc)))
            path = None
        operators = [k for k in _OPERATORS if k in predicate]
        if len(operators) != 1:
            problems.append(
                (place, f"needs exactly one of: {', '.join(_OPERATORS)} (found {len(operators)})")
            )
            continue
        operator = operators[0]
        operand = predicate[operator]
        op_place = f"{place}.{operator}"
        if operator == "in":
            if not _is_list(operand) or not operand:
                problems.append((op_place, "expected a non-empty list of values"))
                continue
            operand = tuple(operand)
        elif operator == "exists":
            if not isinstance(operand, bool):
                problems.append((op_place, f"expected true or false, got {show(operand)}"))
                continue
        elif operator == "matches":
            if not isinstance(operand, str):
                problems.append((op_place, f"expected a regular expression string, got {show(operand)}"))
                continue
            problem = _pattern_problem(operand)
            if problem is not None:
                problems.append((op_place, problem))
                continue
        if path is not None:
            predicates.append((path, operator, operand))
            checks.append(_predicate_check(path, operator, operand))

    templates: list[KeyTemplate] = []
    keys = params.get("keys", ())
    if not _is_list(keys):
        problems.append(("keys", f"expected a list of key templates, got {show(keys)}"))
        keys = ()
    for index, text in enumerate(keys):
        try:
            templates.append(parse_key_template(text))
        except ValueError as exc:
            problems.append((f"keys[{index}]", str(exc)))

    if problems:
        raise MatchParamsError(problems)
    return CompiledMatch(
        type_glob=params["type"],
        checks=tuple(checks),
        keys=tuple(templates),
        globs=tuple(globs),
        predicates=tuple(predicates),
    )


_shared: dict[str, CompiledMatch] = {}
_shared_lock = Lock()


def compiled(params: Any) -> CompiledMatch:
    """The compiled form of ``params``, shared by every route with equal params."""
    try:
        canonical = json.dumps(thaw(params), sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return compile_params(params)
    found = _shared.get(canonical)
    if found is None:
        found = compile_params(params)
        with _shared_lock:
            if len(_shared) >= _CACHE_LIMIT:
                _shared.clear()
            _shared[canonical] = found
    return found


# --- the handler ---------------------------------------------------------------------------


class Match:
    """The declarative route handler: globs on type/source/subject, ``where`` predicates and
    key templates (see the module docstring)."""

    def __init__(self) -> None:
        # id(params) -> (params, compiled): the route's params object is held, so its id
        # cannot be reused while the entry exists.
        self._by_id: dict[int, tuple[Any, CompiledMatch]] = {}

    @classmethod
    def validate_params(cls, params: Any) -> Iterable[tuple[str, str]]:
        """Yield ``(place, message)`` for each problem in a route's params."""
        try:
            compile_params(params)
        except MatchParamsError as exc:
            return exc.problems
        return ()

    def _compiled(self, params: Any) -> CompiledMatch:
        entry = self._by_id.get(id(params))
        if entry is not None and entry[0] is params:
            return entry[1]
        found = compiled(params)
        if len(self._by_id) >= _CACHE_LIMIT:
            self._by_id = {}
        self._by_id[id(params)] = (params, found)
        return found

    def match(self, event: EventSnapshot, route: RouteInfo) -> RouteDecision:
        """Decide whether ``event`` matches the route's params; the reason names the first
        failing condition. Raises :class:`MatchParamsError` for params that do not compile
        (a configuration problem, not the Event's), and :class:`~routing.extension.Invalid`
        for a key too long to store."""
        return self._compiled(route.params).decide(event)

    def samples(self, scope: str, route: RouteInfo, clock: Clock) -> list[Sample]:
        """One sample Event built from the params, matched by its own route or saying why
        it cannot be (R45): see :mod:`routing.handlers.samples`."""
        return [route_sample(self._compiled(route.params), scope=scope, slot=route.slot, clock=clock)]
