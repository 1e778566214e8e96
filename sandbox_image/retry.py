"""How the sandbox runtime waits between tries: backoff, deadlines, Retry-After.

Shared by the event sender (`outbox`), the snapshot upload (`snapshot`) and the
input fetches (`fetch`). The controller side has its own formula in
`controller/retry.py`; this package never imports the controller.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx


def retry_after_s(response: httpx.Response, cap_s: float = 60.0) -> float | None:
    """The response's Retry-After in seconds (the numeric form only), capped."""
    value = response.headers.get("Retry-After", "")
    try:
        return min(max(float(value), 0.0), cap_s)
    except ValueError:
        return None


@dataclass
class Backoff:
    """Capped exponential backoff with full jitter: uniform(0, min(cap, base * 2**n))."""

    base_s: float = 0.25
    cap_s: float = 10.0
    rng: random.Random | None = None

    def delay(self, attempt: int) -> float:
        """The pause after failed attempt number `attempt` (1-based)."""
        ceiling = min(self.cap_s, self.base_s * 2 ** min(attempt - 1, 30))
        return (self.rng or random).uniform(0, ceiling)


class Deadline:
    """A time limit on monotonic time that a stop request (SIGTERM) can pull in."""

    def __init__(self, budget_s: float, stop_requested: Callable[[], bool] = lambda: False,
                 stop_budget_s: float = 10.0) -> None:
        self.budget_s = budget_s
        self._at = time.monotonic() + budget_s
        self._stop_requested = stop_requested
        self._stop_budget_s = stop_budget_s
        self._shortened = False

    def remaining(self) -> float:
        """Seconds left (<= 0 when passed)."""
        now = time.monotonic()
        if not self._shortened and self._stop_requested():
            self._shortened = True
            self._at = min(self._at, now + self._stop_budget_s)
        return self._at - now

    def sleep(self, seconds: float) -> None:
        """Sleep `seconds`, but not past the deadline (which may move closer meanwhile)."""
        end = time.monotonic() + seconds
        while (left := min(end - time.monotonic(), self.remaining())) > 0:
            time.sleep(min(left, 0.1))
