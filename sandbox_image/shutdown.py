"""The stop request: SIGTERM or SIGINT sets a flag that the runtime checks at step
boundaries and while it sleeps, so a stopped sandbox still reports and uploads."""

from __future__ import annotations

import signal
import time
from types import FrameType


class ShutdownFlag:
    """Set by SIGTERM/SIGINT; checked at step boundaries and while sleeping."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    def install(self) -> None:
        """Handle SIGTERM and SIGINT (main thread only)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Only set a flag: logging here could deadlock on a lock the main thread holds.
        self.signal_name = signal.Signals(signum).name

    def is_set(self) -> bool:
        """Whether a stop was requested."""
        return self.signal_name is not None

    def sleep(self, seconds: float) -> bool:
        """Sleep up to `seconds`; returns True if a stop was requested meanwhile."""
        end = time.monotonic() + seconds
        while not self.is_set() and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))
        return self.is_set()
