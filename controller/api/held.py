"""A place taken from a bounded pool (a log follower, a transfer), given back exactly once
however its stream ends: finished, failed, or closed by the client."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Held:
    """Runs `give_back` on the first `release()` (or on leaving a `with`), never again."""

    def __init__(self, give_back: Callable[[], None]) -> None:
        self._give_back = give_back
        self._released = False
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._give_back()

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
