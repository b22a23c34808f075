"""Sample Events of the built-in ``match`` handler (R45): one per route, built from its
conditions and checked against the route itself before it is offered.

Each field is given a value every condition on it holds for: the first such value among those
its ``equals`` and ``in`` name, else among its glob's example (:func:`glob_example`) and the
strings its ``matches`` patterns find (:func:`regex_example`); an ``exists: false`` field is
left out, and a key template's field is filled in last. The route's own compiled params then
decide the sample; when they refuse it (conditions that cannot all hold, a pattern the
generator cannot follow), it carries a note saying which condition fails instead of passing
for a sample of its route.
"""

from __future__ import annotations

import fnmatch
import functools
import string
from re import _constants as sre  # the standard library's own parse of a pattern
from re import _parser as sre_parser
from typing import Any, Protocol

import re2

from routing.extension import Clock, EventSnapshot, Invalid, RouteDecision, Sample, freeze
from routing.handlers.values import MISSING, RE2_OPTIONS, FieldPath, same, thaw

FILLER = "sample"

# What a sample's string may be built of, preferred first: a class, a negated class or a
# category (``\w``, ``\S``…) takes the first of these it allows.
_PREFERRED = "axA0_-.:/ " + string.ascii_letters + string.digits + string.punctuation
# How many strings are tried for one pattern (alternatives, one more repetition), and how
# long one may be: a sample is for reading.
_CANDIDATES = 32
_LONGEST = 1000


class Conditions(Protocol):
    """What a sample is built from: a route's compiled ``match`` params
    (:class:`routing.handlers.match.CompiledMatch`)."""

    globs: tuple[tuple[str, str], ...]
    predicates: tuple[tuple[FieldPath, str, Any], ...]
    keys: tuple[Any, ...]  # key templates: their parts are literal text or field paths

    def decide(self, event: EventSnapshot) -> RouteDecision: ...


class _Cannot(Exception):
    """The pattern uses what the generator does not follow (a backreference, say)."""


# --- values for globs and patterns ---------------------------------------------------------


def glob_example(glob: str, filler: str = FILLER) -> str:
    """A value the glob matches: ``*`` becomes ``filler``, ``?`` an ``x``, a class its first
    member."""
    out: list[str] = []
    i = 0
    while i < len(glob):
        char = glob[i]
        if char == "*":
            out.append(filler)
        elif char == "?":
            out.append("x")
        elif char == "[":
            end = glob.find("]", i + 2)
            if end == -1:
                out.append(char)
            else:
                members = glob[i + 1 : end]
                if members.startswith("!"):
                    # Any character outside the class: pick one that is not in it.
                    out.append(next(c for c in "x0_-" if c not in members))
                else:
                    out.append(members[0])
                i = end
        else:
            out.append(char)
        i += 1
    return "".join(out)


def regex_example(pattern: str) -> str | None:
    """A string the regular expression finds (searched, as ``matches`` runs it, on RE2), or
    ``None`` when the generator cannot build one: it follows literals, classes, categories,
    ``.``, alternatives, groups and repetitions, and tries the first few alternatives and one
    more repetition before it gives up."""
    return next(iter(_examples(pattern)), None)


@functools.lru_cache(maxsize=256)
def _examples(pattern: str) -> tuple[str, ...]:
    """The strings tried for ``pattern`` that it finds, preferred first (none: it cannot)."""
    try:
        tried = _sequence(list(sre_parser.parse(pattern)))
        search = re2.compile(pattern, options=RE2_OPTIONS).search
    except (_Cannot, re2.error, RecursionError, ValueError):
        return ()
    return tuple(dict.fromkeys(text for text in tried if search(text)))


def _sequence(items: list) -> list[str]:
    """Strings for a sequence of parsed items: each item's first choice, then each item's
    other choices one at a time (the others kept at their first)."""
    choices = [_choices(op, av) for op, av in items]
    first = [options[0] for options in choices]
    out = ["".join(first)]
    for index, options in enumerate(choices):
        for other in options[1:]:
            out.append("".join([*first[:index], other, *first[index + 1 :]]))
            if len(out) >= _CANDIDATES:
                return out
    return out


def _choices(op: Any, av: Any) -> list[str]:
    if op is sre.LITERAL:
        return [chr(av)]
    if op is sre.NOT_LITERAL:
        return [next(c for c in _PREFERRED if ord(c) != av)]
    if op is sre.ANY:
        return ["x"]
    if op is sre.IN:
        return [_class_char(av)]
    if op is sre.AT or op is sre.ASSERT or op is sre.ASSERT_NOT:
        return [""]  # a position: the whole string is checked on RE2 afterwards
    if op is sre.SUBPATTERN:
        return _sequence(list(av[-1]))
    if op is sre.ATOMIC_GROUP:
        return _sequence(list(av))
    if op is sre.BRANCH:
        out = [text for branch in av[1] for text in _sequence(list(branch))[:2]]
        return out[:_CANDIDATES]
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
        low, high, item = av
        inner = _sequence(list(item))
        if low * len(inner[0]) > _LONGEST:
            raise _Cannot("too long")
        out = [inner[0] * low]
        if high is sre.MAXREPEAT or high > low:
            out.append(inner[0] * (low + 1))
        out.extend(other * low for other in inner[1:3] if low)
        return out
    raise _Cannot(f"{op} is not followed")


def _class_char(items: list) -> str:
    """A character of a class: its first member's, or for a negated class the first
    preferred character outside it."""
    negated = bool(items) and items[0][0] is sre.NEGATE
    members = items[1:] if negated else items
    if not negated and members:
        op, av = members[0]
        if op is sre.LITERAL:
            return chr(av)
        if op is sre.RANGE:
            return chr(av[0])
    for char in _PREFERRED:
        if any(_member(char, op, av) for op, av in members) != negated:
            return char
    raise _Cannot("no preferred character in the class")


def _member(char: str, op: Any, av: Any) -> bool:
    if op is sre.LITERAL:
        return ord(char) == av
    if op is sre.RANGE:
        return av[0] <= ord(char) <= av[1]
    if op is sre.CATEGORY:
        return _CATEGORIES[av](char)
    raise _Cannot(f"{op} in a class is not followed")


_CATEGORIES = {
    sre.CATEGORY_DIGIT: str.isdigit,
    sre.CATEGORY_NOT_DIGIT: lambda c: not c.isdigit(),
    sre.CATEGORY_SPACE: str.isspace,
    sre.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
    sre.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
    sre.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
}


# --- the sample ----------------------------------------------------------------------------


def route_sample(spec: Conditions, *, scope: str, slot: str, clock: Clock) -> Sample:
    """The sample Event of route ``slot`` whose compiled params are ``spec``: its type, source
    and subject from the globs, data satisfying each ``where`` condition and the key
    templates, ``time`` from ``clock`` (ISO 8601); with a note when it cannot match."""
    now = clock()
    event: dict[str, Any] = {
        "id": f"sample-{slot}",
        "source": FILLER,
        "type": "",
        "subject": "",
        "scope": scope,
        "time": now.isoformat(),
        "data": {},
    }
    # Every condition on one field, in order: a glob is one too (type, source, subject).
    fields: dict[str, tuple[FieldPath, list[tuple[str, Any]]]] = {}
    for name, glob in spec.globs:
        event[name] = glob_example(glob)
        fields[name] = (FieldPath(text=name, root=name, parts=()), [("glob", glob)])
    for path, operator, operand in spec.predicates:
        fields.setdefault(path.text, (path, []))[1].append((operator, operand))
    unfollowed = [why for path, conditions in fields.values() if (why := _satisfy(event, path, conditions))]
    for template in spec.keys:
        for part in template.parts:
            if type(part) is FieldPath and _get(event, part) in (MISSING, None, ""):
                _set(event, part, FILLER)
    why = _refusal(spec, event, now)
    if why is None:
        return Sample(name=slot, event=event)
    note = f"this sample does not match route {slot}: {'; '.join([*unfollowed, why])}; edit it before tracing"
    return Sample(name=slot, event=event, note=note)


def _satisfy(event: dict[str, Any], path: FieldPath, conditions: list[tuple[str, Any]]) -> str:
    """Give ``path`` a value every one of ``conditions`` holds for, the first one found among
    the values they name (``equals``, ``in``), else the value it has and the strings its
    patterns find; ``""``, or why no value could be built for a pattern."""
    if any(operator == "exists" and not operand for operator, operand in conditions):
        _drop(event, path)
        return ""
    named = [
        thaw(value)
        for operator, operand in conditions
        if operator in ("equals", "in")
        for value in (operand if operator == "in" else (operand,))
    ]
    patterns = [operand for operator, operand in conditions if operator == "matches"]
    current = _get(event, path)
    if named:
        candidates = named
    elif patterns:
        candidates = [current] + [text for pattern in patterns for text in _examples(pattern)]
    else:
        candidates = [FILLER if current is MISSING else current]
    value = next((v for v in candidates if all(_holds(v, *c) for c in conditions)), MISSING)
    if value is not MISSING:
        _set(event, path, value)
        return ""
    # None holds for all: the first value named, or the one it has, and the route says why.
    if named:
        _set(event, path, named[0])
    elif current is MISSING:
        _set(event, path, FILLER)
    unbuilt = [pattern for pattern in patterns if not _examples(pattern)]
    return "; ".join(f"no value for {path.text} matching /{p}/ could be built" for p in unbuilt)


def _holds(value: Any, operator: str, operand: Any) -> bool:
    """Whether one condition holds for ``value`` (the module's missing marker: absent)."""
    if operator == "glob":
        return isinstance(value, str) and fnmatch.fnmatchcase(value, operand)
    if operator == "equals":
        return value is not MISSING and same(value, operand)
    if operator == "in":
        return value is not MISSING and any(same(value, item) for item in operand)
    if operator == "exists":
        return (value is not MISSING) == operand
    return isinstance(value, str) and re2.compile(operand, options=RE2_OPTIONS).search(value) is not None


def _refusal(spec: Conditions, event: dict[str, Any], now) -> str | None:
    """Why the route's params refuse the sample, or ``None`` when they match it."""
    snapshot = EventSnapshot(
        0,
        event["id"],
        event["source"],
        event["type"],
        event["subject"],
        event["scope"],
        now,
        freeze(event["data"]),
        (),
        None,
        None,
        None,
        0,
    )
    try:
        decision = spec.decide(snapshot)
    except Invalid as exc:
        return str(exc)
    return None if decision.matched else decision.reason


def _get(event: dict[str, Any], path: FieldPath) -> Any:
    node: Any = event
    for part in (path.root, *path.parts):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def _set(event: dict[str, Any], path: FieldPath, value: Any) -> None:
    if not path.parts:
        event[path.root] = value
        return
    node = event.setdefault("data", {})
    if not isinstance(node, dict):
        node = event["data"] = {}
    for part in path.parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path.parts[-1]] = value


def _drop(event: dict[str, Any], path: FieldPath) -> None:
    node: Any = event
    names = (path.root, *path.parts)
    for part in names[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(names[-1], None)
