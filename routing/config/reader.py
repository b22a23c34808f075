"""Reading YAML with places: each value keeps where it was in the document, so problems name it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from routing.config.problems import ConfigProblem

if TYPE_CHECKING:
    import yaml

MAX_DOCUMENT_BYTES = 1024 * 1024
MAX_NODES = 50_000


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


class Reader:
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
        # PyYAML is imported by what reads documents only, not by every reader of the
        # configuration (the CLI's start-up, the API).
        import yaml

        try:
            loader = yaml.SafeLoader(text)
        except yaml.reader.ReaderError as exc:
            # The reader checks every character at once: a control character is refused here.
            line = text.count("\n", 0, exc.position) + 1
            self.problems.append(
                ConfigProblem(
                    "document",
                    f"not valid YAML: unacceptable character #x{exc.character:04x} (line {line}): {exc.reason}",
                    line,
                )
            )
            return None
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
            column = mark.column + 1 if mark else None
            self.problems.append(ConfigProblem("document", f"not valid YAML: {what}{where}", line, column))
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
        import yaml

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
        import yaml

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
        import yaml

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
