"""Query helpers shared by the apps' hot paths."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db.models import Expression


class Listed(Expression):
    """Plain values (ints or strings) as the right side of an ``__in`` lookup, already in
    the form the column takes: ``filter(seq__in=Listed(seqs))`` is ``filter(seq__in=seqs)``
    without the per-value preparation Django runs three times for a list (a window's
    500-value lists cost more in it than in the database). ``None`` is left out (it never
    equals anything) and an empty list matches nothing, as with a list."""

    def __init__(self, values: Iterable[Any]) -> None:
        super().__init__()
        self.values = [value for value in values if value is not None]

    def __repr__(self) -> str:
        return f"Listed({self.values!r})"

    def resolve_expression(self, query=None, allow_joins=True, reuse=None, summarize=False, for_save=False):
        return self

    def as_sql(self, compiler, connection):
        if not self.values:
            raise EmptyResultSet
        return "(" + ", ".join(["%s"] * len(self.values)) + ")", list(self.values)
