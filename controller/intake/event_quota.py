"""Per-attempt event quotas: how many events and bytes one sandbox attempt may post.

A sandbox is untrusted: without a cap it could fill the database with 64 kB events.
Counters live in memory, keyed by (sandbox, attempt); the first request of an attempt
this process sees starts them from what the database already holds, so a restarted
controller keeps counting. Every accepted request counts, replays included (a
replay costs the controller a request too); a refused one is given back.
"""

from __future__ import annotations

import threading

from sqlalchemy import Engine, Text, cast, func, select

from controller.db.schema import events
from controller.errors import PayloadTooLargeError, QuotaExceededError

# What a stored event costs beyond its data, in the restart estimate (ids, time, type).
EVENT_OVERHEAD_BYTES = 120


class EventQuota:
    """Counts events and bytes per attempt; `reserve` refuses what would pass a cap."""

    def __init__(self, engine: Engine, max_events: int, max_bytes: int) -> None:
        self.engine, self.max_events, self.max_bytes = engine, max_events, max_bytes
        self._used: dict[tuple[str, int], list[int]] = {}
        self._lock = threading.Lock()

    def reserve(self, sandbox_id: str, attempt: int, count: int, size: int) -> None:
        """Count a request of `count` events and `size` bytes, or raise 429/413 naming the cap."""
        key = (sandbox_id, attempt)
        with self._lock:
            known = key in self._used
        if not known:
            stored = self._stored(sandbox_id, attempt)
            with self._lock:
                self._used.setdefault(key, stored)
        with self._lock:
            used = self._used[key]
            if used[0] + count > self.max_events:
                raise QuotaExceededError(
                    f"sandbox {sandbox_id} attempt {attempt} has posted {used[0]} events; "
                    f"{count} more would pass the cap of {self.max_events} events per attempt",
                    hint="post fewer, coarser events (or raise SIMPLE_EVENTS_MAX_PER_ATTEMPT)",
                )
            if used[1] + size > self.max_bytes:
                raise PayloadTooLargeError(
                    f"sandbox {sandbox_id} attempt {attempt} has posted {used[1]} bytes of "
                    f"events; {size} more would pass the cap of {self.max_bytes} bytes per "
                    "attempt",
                    hint="send smaller event data (or raise SIMPLE_EVENTS_MAX_BYTES_PER_ATTEMPT)",
                )
            used[0] += count
            used[1] += size

    def release(self, sandbox_id: str, attempt: int, count: int, size: int) -> None:
        """Give back a reservation whose request was refused."""
        with self._lock:
            used = self._used.get((sandbox_id, attempt))
            if used is not None:
                used[0], used[1] = max(0, used[0] - count), max(0, used[1] - size)

    def _stored(self, sandbox_id: str, attempt: int) -> list[int]:
        with self.engine.connect() as conn:
            count, size = conn.execute(
                select(
                    func.count(),
                    func.coalesce(func.sum(func.length(cast(events.c.data, Text))), 0),
                ).where(events.c.sandbox_id == sandbox_id, events.c.attempt == attempt)
            ).one()
        return [int(count), int(size) + EVENT_OVERHEAD_BYTES * int(count)]
