"""Helpers of the live-update reader's tests: a reader that records what it would send."""

from __future__ import annotations

import asyncio

from conduit_site.console.live import LiveReader


class RecordingReader(LiveReader):
    """A :class:`LiveReader` whose passes run in the test (``step()``) and whose messages are
    recorded instead of sent: ``sent`` holds, per pass that sent, the groups and the position."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[list[str], int]] = []
        self.loop = asyncio.new_event_loop()

    def listen(self, *groups: str) -> None:
        """Groups a websocket of this process joined (no thread: the test runs the passes)."""
        with self._lock:
            self._groups.update(groups)
            self._loop = self.loop

    def _send(self, loop, groups, position) -> None:
        self.sent.append((list(groups), position))
        self.messages += len(groups)

    def close(self) -> None:
        self.loop.close()
