"""The claim-ahead pipeline: with a backlog, a pass claims the next window before its commit
and the handler pool asks that window's routes while the commit's transaction ends.

A commit alone (SQLite, where ``BEGIN IMMEDIATE`` serialises writers) with a full window is
pipelined: the database makes the commit durable without holding the interpreter, so the
commit and the next window's handler calls run at once. The next pass commits that window on
those evaluations. Evaluation depends only on the Event and the generation, never on what a
commit wrote, and the next window's commit reads its world and orders its Events behind any
earlier unrouted input as every commit does.
"""

from __future__ import annotations

from collections.abc import Callable

from routing.engine.asking import Asking
from routing.extension import EventSnapshot


class Ahead:
    """The next window, claimed before a pass's commit, and its routes' answers once asked."""

    def __init__(self, window: list[EventSnapshot], ask: Callable[[list[EventSnapshot]], Asking]) -> None:
        self.window = window
        self.asked: Asking | None = None
        self._ask = ask

    def ask(self) -> None:
        """Ask the window's routes (once: a retried commit calls this again)."""
        if self.asked is None:
            self.asked = self._ask(self.window)

    def settle_answers(self) -> None:
        """Wait for the routes' answers, if asked (the pool's workers are done after it)."""
        if self.asked is not None:
            self.asked.result()
