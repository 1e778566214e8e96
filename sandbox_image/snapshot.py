"""The sandbox's SQLite file: snapshot tables, consistent copies, and the PUT upload.

One file in the working directory holds the contract's `runs` and `steps`
tables, the simulation's `world` state and the event outbox, so what the
sandbox did and the events it has not yet delivered survive together. One
connection is shared by the main thread and the event sender, serialised by a
lock. A copy for upload is made with SQLite's backup API under that lock, so it
is always a committed, consistent state.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sandbox_image.contract import SNAPSHOT_SCHEMA_SQL
from sandbox_image.retry import Backoff, Deadline, retry_after_s

logger = logging.getLogger(__name__)

SNAPSHOT_FILENAME = "snapshot.sqlite"
WORLD_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS world (id INTEGER PRIMARY KEY CHECK (id = 1),
  step INTEGER NOT NULL, state TEXT NOT NULL);
"""
UPLOAD_TIMEOUT_S = 30.0


class SnapshotUploadError(RuntimeError):
    """The snapshot could not be uploaded before the deadline, or was refused."""


@dataclass(frozen=True)
class RunRecord:
    """The one `runs` row of the snapshot."""

    run_id: str
    template_id: str
    status: str
    started_at: str
    finished_at: str | None
    cost_usd: float
    tokens_used: int
    llm_calls: int
    entities_created: int
    timepoints_created: int
    mechanisms: tuple[str, ...]


class SnapshotStore:
    """The SQLite file and its lock; every read and write goes through `transaction`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.RLock()
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript(SNAPSHOT_SCHEMA_SQL + WORLD_SCHEMA_SQL)

    @classmethod
    def create(cls, path: Path) -> SnapshotStore:
        """A fresh file at `path`, replacing what a previous attempt may have left there."""
        for leftover in (path, *(path.with_name(path.name + suffix)
                                 for suffix in ("-journal", "-wal", "-shm"))):
            if leftover.exists():
                logger.warning("removing %s left by an earlier attempt", leftover)
                leftover.unlink()
        return cls(path)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write transaction, holding the lock."""
        with self.lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def use_fast_commits(self) -> None:
        """WAL without an fsync per commit: a batch commits one transaction per item.

        A crash of the process loses nothing; a crash of the machine may lose the
        last commits, which a retry never reads anyway (it starts from a new file and
        the uploaded checkpoint)."""
        with self.lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")

    def reset(self) -> None:
        """Forget every result row (a resume that went wrong); the outbox stays."""
        with self.transaction() as conn:
            for table in ("runs", "steps", "items", "world"):
                conn.execute(f"DELETE FROM {table}")

    def ensure_schema(self, sql: str) -> None:
        """Create tables (`CREATE TABLE IF NOT EXISTS ...` statements)."""
        with self.lock:
            self._conn.executescript(sql)

    def read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Run one query under the lock and return its rows."""
        with self.lock:
            return self._conn.execute(sql, params).fetchall()

    def copy_to(self, dest: Path) -> None:
        """Write a consistent copy of the file to `dest` (SQLite's online backup)."""
        target = sqlite3.connect(dest)
        try:
            with self.lock:
                self._conn.backup(target)
            target.execute("PRAGMA journal_mode=DELETE")
        finally:
            target.close()

    def snapshot_bytes(self) -> bytes:
        """The bytes of a consistent copy, made in a temporary file next to the original."""
        with tempfile.TemporaryDirectory(dir=self.path.parent, prefix=".snapshot-") as tmp:
            copy = Path(tmp) / SNAPSHOT_FILENAME
            self.copy_to(copy)
            return copy.read_bytes()

    def close(self) -> None:
        """Close the connection."""
        with self.lock:
            self._conn.close()


def write_run(conn: sqlite3.Connection, run: RunRecord) -> None:
    """Insert or replace the `runs` row."""
    conn.execute(
        "INSERT OR REPLACE INTO runs (run_id, template_id, status, started_at, finished_at, "
        "cost_usd, tokens_used, llm_calls, entities_created, timepoints_created, "
        "mechanisms_used) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (run.run_id, run.template_id, run.status, run.started_at, run.finished_at,
         run.cost_usd, run.tokens_used, run.llm_calls, run.entities_created,
         run.timepoints_created, json.dumps(list(run.mechanisms))),
    )


def write_step(conn: sqlite3.Connection, run_id: str, step: int, *, duration_ms: int,
               actions: int, failures: int, cost_usd: float, tokens: int) -> None:
    """Insert one `steps` row."""
    conn.execute(
        "INSERT INTO steps (run_id, step, duration_ms, actions, failures, cost_usd, tokens) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (run_id, step, duration_ms, actions, failures, cost_usd, tokens),
    )


def write_item(conn: sqlite3.Connection, result: Any) -> None:
    """Insert one `items` row (a batch.ItemResult)."""
    conn.execute(
        "INSERT INTO items (item_id, status, passed, reason, error, duration_ms, data) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (result.item_id, result.status, None if result.passed is None else int(result.passed),
         result.reason, result.error, result.duration_ms, json.dumps(result.data)),
    )


def write_world(conn: sqlite3.Connection, step: int, state: object) -> None:
    """Replace the stored world state."""
    conn.execute("INSERT OR REPLACE INTO world (id, step, state) VALUES (1, ?, ?)",
                 (step, json.dumps(state, sort_keys=True)))


def upload_snapshot(client: httpx.Client, url: str, body: bytes, deadline: Deadline,
                    backoff: Backoff | None = None) -> int:
    """PUT `body` to the self-authorising `url`, retrying connection errors, 429 and 5xx
    until `deadline`; returns the number of attempts. Never sends an Authorization
    header: on a presigned S3 URL it would break the signature."""
    backoff = backoff or Backoff(base_s=0.5, cap_s=15.0)
    attempt = 0
    while True:
        attempt += 1
        try:
            response = client.put(
                url, content=body, headers={"Content-Type": "application/octet-stream"},
                timeout=max(0.5, min(UPLOAD_TIMEOUT_S, deadline.remaining())),
            )
        except httpx.TransportError as e:
            problem, delay = f"{type(e).__name__}: {e}", backoff.delay(attempt)
        else:
            if response.is_success:
                return attempt
            problem = f"HTTP {response.status_code}: {response.text[:300]}"
            if not (response.status_code == 429 or response.status_code >= 500):
                raise SnapshotUploadError(f"snapshot upload refused: {problem}")
            delay = retry_after_s(response) or backoff.delay(attempt)
        if delay >= deadline.remaining():
            raise SnapshotUploadError(f"snapshot upload failed after {attempt} attempts "
                                      f"(time limit {deadline.budget_s:.0f} s): {problem}")
        logger.warning("snapshot upload attempt %d failed (%s); retrying in %.1f s",
                       attempt, problem, delay)
        deadline.sleep(delay)
