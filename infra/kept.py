"""Values kept per process for the keys read last: what never changes once written (a stored
generation's effective configuration, its receivers) is read once and then served from memory."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable


class KeptPerProcess[K: Hashable, V]:
    """A bounded, thread-safe map of the ``size`` keys read last. ``load`` runs outside the lock:
    two threads may load one key at once, and the value kept is the last one loaded, so what is
    loaded must be the same for the same key."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, load: Callable[[], V]) -> V:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = load()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value

    def clear(self) -> None:
        """Forget every value (after a database is rolled back and its ids may be given again)."""
        with self._lock:
            self._values.clear()

    def __len__(self) -> int:
        return len(self._values)
