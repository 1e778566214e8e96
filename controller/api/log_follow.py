"""Following a sandbox's logs: async, capped, and ended by the client's disconnect.

A follower polls the backend's logs from the event loop (each read a short call in a
worker thread, of at most LOG_CHUNK bytes from the offset it reached: never the whole
log again), so followers never hold a worker while they wait: `/healthz` and the
API stay served however many follow. Followers are capped per sandbox and in total;
one past a cap gets 429 naming it. When the client goes away, Starlette cancels the
stream, and the follower's slot is given back.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import Engine, select

from controller.api.held import Held
from controller.backends.base import LOG_CHUNK
from controller.db.schema import sandboxes
from controller.errors import QuotaExceededError, SimpleError
from controller.states import SandboxStatus

FOLLOW_POLL_S = 0.5


class FollowerSlots:
    """How many clients follow each sandbox's logs, under the two caps."""

    def __init__(self, per_sandbox: int, total: int) -> None:
        self.per_sandbox, self.total = per_sandbox, total
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def take(self, sandbox_id: str) -> Slot:
        """A slot for one follower, or QuotaExceededError (429) naming the cap reached."""
        with self._lock:
            if self._counts[sandbox_id] >= self.per_sandbox:
                raise QuotaExceededError(
                    f"sandbox {sandbox_id} already has {self.per_sandbox} log followers, "
                    "the cap per sandbox",
                    hint="read the logs without follow=true, or raise "
                    "SIMPLE_LOG_FOLLOWERS_PER_SANDBOX",
                )
            if sum(self._counts.values()) >= self.total:
                raise QuotaExceededError(
                    f"the controller already serves {self.total} log followers, its cap",
                    hint="try again later, or raise SIMPLE_LOG_FOLLOWERS_TOTAL",
                )
            self._counts[sandbox_id] += 1
        return Slot(self, sandbox_id)

    def count(self, sandbox_id: str | None = None) -> int:
        with self._lock:
            return self._counts[sandbox_id] if sandbox_id else sum(self._counts.values())

    def _give_back(self, sandbox_id: str) -> None:
        with self._lock:
            self._counts[sandbox_id] -= 1
            if self._counts[sandbox_id] <= 0:
                del self._counts[sandbox_id]


class Slot(Held):
    """One follower's place; released once, however the stream ends."""

    def __init__(self, slots: FollowerSlots, sandbox_id: str) -> None:
        super().__init__(lambda: slots._give_back(sandbox_id))


def follow(controller: Any, sandbox_id: str, slot: Slot) -> AsyncIterator[bytes]:
    """The stream of a sandbox's output until it ends; `slot` is released with it."""
    stream = _follow(controller, sandbox_id, slot)
    # A stream cancelled before its first step never runs its `finally`.
    weakref.finalize(stream, slot.release)
    return stream


async def _follow(controller: Any, sandbox_id: str, slot: Slot) -> AsyncIterator[bytes]:
    offset = 0
    read = controller.backend.read_logs_from
    try:
        while True:
            running = await asyncio.to_thread(_running, controller.engine, sandbox_id)
            while True:  # what was written since the last look, a bounded chunk at a time
                try:
                    data, offset = await asyncio.to_thread(read, sandbox_id, offset, LOG_CHUNK)
                except SimpleError as e:
                    yield f"\n[simple: log stream ended: {e.message}]\n".encode()
                    return
                if data:
                    yield data
                if len(data) < LOG_CHUNK:  # caught up
                    break
            if not running:
                return
            await asyncio.sleep(FOLLOW_POLL_S)
    finally:
        slot.release()


def _running(engine: Engine, sandbox_id: str) -> bool:
    with engine.connect() as conn:
        query = select(sandboxes.c.status).where(sandboxes.c.id == sandbox_id)
        status = conn.execute(query).scalar()
    return bool(status == SandboxStatus.RUNNING)
