"""The controller side's one retry-backoff formula (the sandbox's: `sandbox_image.retry`).

Capped exponential backoff: the ceiling after failed attempt `n` (1-based) is
`min(cap, base * 2**(n-1))`; the caller's jitter picks where under it to wait.
"""

from __future__ import annotations

import random
from collections.abc import Callable

_MAX_DOUBLINGS = 30  # 2**30 * any sane base is past every cap; keeps the float finite


def backoff_ceiling_s(attempt: int, base_s: float, cap_s: float) -> float:
    """The longest pause after failed attempt number `attempt` (1-based). Pure."""
    return min(cap_s, base_s * 2 ** min(max(attempt, 1) - 1, _MAX_DOUBLINGS))


def backoff_s(
    attempt: int,
    base_s: float,
    cap_s: float,
    uniform: Callable[[], float] = random.random,
    *,
    equal_jitter: bool = False,
) -> float:
    """The pause after attempt `attempt`: full jitter (0..ceiling) or equal jitter
    (ceiling/2..ceiling). `uniform` returns a number in [0, 1)."""
    ceiling = backoff_ceiling_s(attempt, base_s, cap_s)
    if equal_jitter:
        return ceiling / 2 + uniform() * ceiling / 2
    return uniform() * ceiling
