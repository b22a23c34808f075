"""Configuration problems: what is wrong with a document, and where."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with a document: where (``scopes[1].routes[0].binding``), what, and
    the line it starts on when known (and its column, 1-based, when the YAML reader says)."""

    place: str
    message: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        return f"{self.place}: {self.message}"


class ConfigInvalid(Exception):
    """A document that cannot be applied; ``problems`` lists everything wrong with it."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


class GenerationNotFound(LookupError):
    """No Generation answers the reference (``3``, ``candidate:12``, or the live one)."""
