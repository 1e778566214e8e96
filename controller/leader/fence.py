"""Fencing: what a leader writes or asks of the backend is refused once it is not leading.

`fence_engine` makes every transaction that writes on an engine first read the lease row
`FOR SHARE` and compare its epoch with the one this process holds, in that same
transaction: the row stays locked until the transaction ends, so a takeover (which
updates the row) waits for it, and a transaction begun after a takeover sees the new
epoch and is refused (`FencedError`) before it changes anything. A leader paused past its
lease and resumed therefore records nothing, and steps down on its first try.

`FencedBackend` puts the same check (this process still leading, the row's epoch still
its own) before every launch, stop and removal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import Engine, event, select

from controller.backends.base import Backend, Observed, SandboxSpec
from controller.db.schema import leases
from controller.errors import FencedError
from controller.leader.elector import Leadership

logger = logging.getLogger(__name__)

_CHECK = "SELECT epoch FROM leases WHERE name = %s FOR SHARE"


def fence_engine(engine: Engine, lease_name: str, leadership: Leadership) -> None:
    """Refuse, in their own transaction, the writes made on `engine` under a stale epoch."""

    def check(conn: Any, cursor: Any, _statement: str, _params: Any, context: Any,
              _many: bool) -> None:
        if conn.info.get("fenced") or context is None:
            return
        if not (context.isinsert or context.isupdate or context.isdelete):
            return
        epoch = leadership.epoch if leadership.leading() else None
        if epoch is None:
            raise FencedError(f"{leadership.holder} is not leading: write refused")
        checker = cursor.connection.cursor()
        try:
            checker.execute(_CHECK, (lease_name,))
            row = checker.fetchone()
        finally:
            checker.close()
        if row is None or int(row[0]) != epoch:
            leadership.step_down(f"the lease is at epoch {row[0] if row else None}, ours {epoch}")
            raise FencedError(f"lease epoch {epoch} is stale: write refused")
        conn.info["fenced"] = True

    def end(conn: Any) -> None:
        conn.info.pop("fenced", None)

    event.listen(engine, "before_cursor_execute", check)
    event.listen(engine, "commit", end)
    event.listen(engine, "rollback", end)


class Fence:
    """Checks, outside any transaction, that this process leads at the lease's epoch."""

    def __init__(self, engine: Engine, lease_name: str, leadership: Leadership) -> None:
        self.engine, self.lease_name, self.leadership = engine, lease_name, leadership

    def check(self, action: str) -> None:
        epoch = self.leadership.epoch if self.leadership.leading() else None
        if epoch is None:
            raise FencedError(f"{self.leadership.holder} is not leading: {action} refused")
        with self.engine.connect() as conn:
            current = conn.execute(
                select(leases.c.epoch).where(leases.c.name == self.lease_name)).scalar()
        if current != epoch:
            self.leadership.step_down(f"the lease is at epoch {current}, ours {epoch}")
            raise FencedError(f"lease epoch {epoch} is stale: {action} refused")


class FencedBackend(Backend):
    """`inner`, with every launch, stop and removal checked by `fence` first."""

    def __init__(self, inner: Backend, fence: Fence | Callable[[str], None]) -> None:
        super().__init__()
        self.inner = inner
        self._check = fence.check if isinstance(fence, Fence) else fence
        for flag in ("name", "supports_adoption", "supports_oom_detection",
                     "stop_removes_output"):  # the inner backend's, as seen by its callers
            object.__setattr__(self, flag, getattr(inner, flag))

    def __getattr__(self, name: str) -> Any:  # flags (supports_*), helpers
        return getattr(self.inner, name)

    def launch(self, spec: SandboxSpec) -> None:
        self._check(f"launch of {spec.env.sandbox_id}")
        self.inner.launch(spec)

    def stop(self, sandbox_id: str) -> None:
        self._check(f"stop of {sandbox_id}")
        self.inner.stop(sandbox_id)

    def remove(self, sandbox_id: str) -> None:
        self._check(f"removal of {sandbox_id}")
        self.inner.remove(sandbox_id)

    def observe(self) -> list[Observed]:
        return self.inner.observe()

    def render(self, spec: SandboxSpec) -> dict[str, Any]:
        return self.inner.render(spec)

    def read_logs(self, sandbox_id: str) -> bytes:
        return self.inner.read_logs(sandbox_id)

    def follow_logs(
        self, sandbox_id: str, is_running: Callable[[], bool], poll_s: float = 0.5
    ) -> Iterator[bytes]:
        return self.inner.follow_logs(sandbox_id, is_running, poll_s)

    def start(self) -> None:
        self.inner.start()

    def close(self) -> None:
        self.inner.close()

    def check(self) -> None:
        self.inner.check()

    def listen_for_exits(self, listener: Callable[[Observed], None]) -> None:
        self.inner.listen_for_exits(listener)
