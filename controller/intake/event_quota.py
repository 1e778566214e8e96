"""Per-attempt event quotas: how many events and bytes one sandbox attempt may post.

A sandbox is untrusted: without a cap it could fill the database with 64 kB events.
Counters live in memory, keyed by (sandbox, attempt); the first request of an attempt
this process sees starts them from what the database already holds, so a restarted
controller keeps counting. Every accepted request counts, replays included (a
replay costs the controller a request too); a refused one is given back.

API replicas (`shared`) count in the attempt's row instead (`attempts.events_posted`,
`event_bytes_posted`), one conditional UPDATE per request, so the cap holds whichever
replica a sandbox's requests reach.
"""

from __future__ import annotations

import threading

from sqlalchemy import Engine, Text, case, cast, func, select, update

from controller.db.schema import attempts, events
from controller.errors import PayloadTooLargeError, QuotaExceededError

# What a stored event costs beyond its data, in the restart estimate (ids, time, type).
EVENT_OVERHEAD_BYTES = 120


class EventQuota:
    """Counts events and bytes per attempt; `reserve` refuses what would pass a cap."""

    def __init__(
        self, engine: Engine, max_events: int, max_bytes: int, shared: bool = False
    ) -> None:
        self.engine, self.max_events, self.max_bytes = engine, max_events, max_bytes
        self.shared = shared
        self._used: dict[tuple[str, int], list[int]] = {}
        self._lock = threading.Lock()

    def reserve(self, sandbox_id: str, attempt: int, count: int, size: int) -> None:
        """Count a request of `count` events and `size` bytes, or raise 429/413 naming the cap."""
        if self.shared:
            self._reserve_shared(sandbox_id, attempt, count, size)
            return
        key = (sandbox_id, attempt)
        with self._lock:
            known = key in self._used
        if not known:
            stored = self._stored(sandbox_id, attempt)
            with self._lock:
                self._used.setdefault(key, stored)
        with self._lock:
            used = self._used[key]
            self._refuse_over(sandbox_id, attempt, used[0], used[1], count, size)
            used[0] += count
            used[1] += size

    def _refuse_over(
        self, sandbox_id: str, attempt: int, events_used: int, bytes_used: int, count: int,
        size: int,
    ) -> None:
        if events_used + count > self.max_events:
            raise QuotaExceededError(
                f"sandbox {sandbox_id} attempt {attempt} has posted {events_used} events; "
                f"{count} more would pass the cap of {self.max_events} events per attempt",
                hint="post fewer, coarser events (or raise SIMPLE_EVENTS_MAX_PER_ATTEMPT)",
            )
        if bytes_used + size > self.max_bytes:
            raise PayloadTooLargeError(
                f"sandbox {sandbox_id} attempt {attempt} has posted {bytes_used} bytes of "
                f"events; {size} more would pass the cap of {self.max_bytes} bytes per "
                "attempt",
                hint="send smaller event data (or raise SIMPLE_EVENTS_MAX_BYTES_PER_ATTEMPT)",
            )

    def _reserve_shared(self, sandbox_id: str, attempt: int, count: int, size: int) -> None:
        """One conditional UPDATE: counted only if it stays within both caps."""
        row = (attempts.c.sandbox_id == sandbox_id, attempts.c.attempt == attempt)
        with self.engine.begin() as conn:
            counted = conn.execute(
                update(attempts)
                .where(*row, attempts.c.events_posted + count <= self.max_events,
                       attempts.c.event_bytes_posted + size <= self.max_bytes)
                .values(events_posted=attempts.c.events_posted + count,
                        event_bytes_posted=attempts.c.event_bytes_posted + size)
            ).rowcount
            if counted:
                return
            used = conn.execute(
                select(attempts.c.events_posted, attempts.c.event_bytes_posted).where(*row)
            ).first()
        if used is None:  # no such attempt: the token check refuses it before this
            return
        self._refuse_over(sandbox_id, attempt, int(used[0]), int(used[1]), count, size)

    def release(self, sandbox_id: str, attempt: int, count: int, size: int) -> None:
        """Give back a reservation whose request was refused."""
        if self.shared:
            with self.engine.begin() as conn:
                conn.execute(
                    update(attempts)
                    .where(attempts.c.sandbox_id == sandbox_id, attempts.c.attempt == attempt)
                    .values(
                        events_posted=case(
                            (attempts.c.events_posted > count,
                             attempts.c.events_posted - count), else_=0),
                        event_bytes_posted=case(
                            (attempts.c.event_bytes_posted > size,
                             attempts.c.event_bytes_posted - size), else_=0),
                    )
                )
            return
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
