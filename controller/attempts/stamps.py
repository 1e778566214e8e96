"""Group commit of the exit path's stamps: where an attempt's log went, when its end was
committed.

Every ended attempt got a transaction of its own for these two UPDATEs, after its end's:
at a thousand sandboxes, a thousand more writers queued on SQLite's one write lock, and
the passes' claims waited behind them. Now a caller that finds no stamps being written
writes every stamp queued meanwhile, its own and the others', in one transaction; the
others wait for that commit (their stamp is written when `stamp` returns, as before).
One `Stamps` per database, owned by its controller (`controller.service.Controller`).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, bindparam, update

from controller.db.schema import attempts, sandboxes

# How long a stamp waits for the transaction that writes it (the database's own
# timeouts end that transaction sooner).
STAMP_WAIT_S = 120.0
MAX_GROUP = 500

# Built once, bound per row: building an UPDATE costs more than running it.
STAMP_LOG = update(sandboxes).where(
    sandboxes.c.id == bindparam("b_id"), sandboxes.c.attempt == bindparam("b_attempt")
)
END_ATTEMPT = update(attempts).where(
    attempts.c.sandbox_id == bindparam("b_id"), attempts.c.attempt == bindparam("b_attempt")
)


class _Stamp:
    def __init__(self, keys: dict[str, Any], log: str | None, recorded_at: datetime | None,
                 dropped: int | None = None):
        self.keys, self.log, self.recorded_at = keys, log, recorded_at
        self.dropped = dropped
        self.done: Future[None] = Future()


class Stamps:
    """The stamps of one database, queued, and whether a caller is writing them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._queued: list[_Stamp] = []
        self._writing = False

    def stamp(self, sandbox_id: str, attempt: int, log: str | None,
              recorded_at: datetime | None, log_dropped: int | None = None) -> None:
        """Write where the attempt's log went (and what its budget dropped) and when its end
        was committed (either may be None), in a transaction shared with the stamps other
        threads queued meanwhile."""
        if not log and not recorded_at:
            return
        keys = {"b_id": sandbox_id, "b_attempt": attempt}
        entry = _Stamp(keys, log, recorded_at, log_dropped)
        with self._lock:
            self._queued.append(entry)
            lead, self._writing = not self._writing, True
        if lead:
            self._write_queued()
        entry.done.result(timeout=STAMP_WAIT_S)  # raises what writing it raised

    def _write_queued(self) -> None:
        """Write groups until none is left (stamps queued during a write come next)."""
        while True:
            with self._lock:
                group, self._queued = self._queued[:MAX_GROUP], self._queued[MAX_GROUP:]
                if not group:
                    self._writing = False
                    return
            try:
                _write(self.engine, group)
            except Exception as e:  # every waiter learns it; the next group tries afresh
                for entry in group:
                    entry.done.set_exception(e)
            else:
                for entry in group:
                    entry.done.set_result(None)


def _write(engine: Engine, group: list[_Stamp]) -> None:
    logs = [{**e.keys, "log_key": e.log, "log_dropped_bytes": e.dropped} for e in group if e.log]
    ends = [{**e.keys, "recorded_at": e.recorded_at} for e in group if e.recorded_at]
    with engine.begin() as conn:
        if logs:
            conn.execute(STAMP_LOG, logs)
        if ends:
            conn.execute(END_ATTEMPT, ends)
