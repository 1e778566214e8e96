"""Resume: restore an earlier attempt's checkpoint (`SIMPLE_RESUME_URL`) and go on from it.

The controller validated the checkpoint like a snapshot before handing out the
URL; the runtime still checks what it needs: the `runs` row is this sandbox's,
its steps are exactly 1..k, and the `world` state (when steps ran) is there.
It then copies the checkpoint's `runs`, `steps`, `items` and `world` rows into
its fresh file, so the final snapshot holds each step and item exactly once.
Anything wrong means starting over, with the reason logged and reported in the
`started` event (`data.resume_error`).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox_image.contract import SNAPSHOT_TABLES
from sandbox_image.simulation import Totals
from sandbox_image.snapshot import SnapshotStore

MAX_CHECKPOINT_BYTES = 1 << 30


class ResumeError(ValueError):
    """The checkpoint cannot be resumed from; the attempt starts over."""


@dataclass
class Restored:
    """What the checkpoint held: the last step, the totals, the world and finished items."""

    step: int
    totals: Totals
    world: dict[str, Any] | None
    item_ids: set[str] = field(default_factory=set)


def restore(store: SnapshotStore, checkpoint: bytes, run_id: str) -> Restored:
    """Copy the checkpoint's rows into `store` (one transaction); raises ResumeError."""
    with tempfile.TemporaryDirectory(prefix="simple-resume-") as tmp:
        path = Path(tmp) / "checkpoint.sqlite"
        path.write_bytes(checkpoint)
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        except sqlite3.Error as e:
            raise ResumeError(f"checkpoint cannot be opened: {e}") from e
        try:
            conn.execute("PRAGMA trusted_schema=OFF")
            return _copy(conn, store, run_id)
        except sqlite3.DatabaseError as e:
            raise ResumeError(f"checkpoint is not a readable SQLite database: {e}") from e
        finally:
            conn.close()


def _copy(source: sqlite3.Connection, store: SnapshotStore, run_id: str) -> Restored:
    runs = _rows(source, "runs", "WHERE run_id = ?", (run_id,))
    if len(runs) != 1:
        raise ResumeError(f"checkpoint has no `runs` row for {run_id}")
    run = dict(zip(SNAPSHOT_TABLES["runs"], runs[0], strict=True))
    steps = _rows(source, "steps", "WHERE run_id = ? ORDER BY step", (run_id,))
    numbers = [s[1] for s in steps]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ResumeError("checkpoint's steps are not exactly 1..k")
    items = _rows(source, "items", "", ()) if _has_table(source, "items") else []
    world = None
    if _has_table(source, "world"):
        found = source.execute("SELECT step, state FROM world WHERE id = 1").fetchone()
        if found is not None and found[0] == len(numbers):
            world = json.loads(found[1])
    totals = Totals(steps_completed=len(numbers), cost_usd=float(run["cost_usd"] or 0),
                    tokens_used=int(run["tokens_used"] or 0),
                    llm_calls=int(run["llm_calls"] or 0),
                    entities_created=int(run["entities_created"] or 0),
                    timepoints_created=int(run["timepoints_created"] or 0))
    with store.transaction() as conn:
        for table, rows in (("steps", steps), ("items", items)):
            columns = SNAPSHOT_TABLES[table]
            conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                             f"({', '.join('?' * len(columns))})", rows)
        if world is not None:
            conn.execute("INSERT OR REPLACE INTO world (id, step, state) VALUES (1, ?, ?)",
                         (len(numbers), json.dumps(world, sort_keys=True)))
    return Restored(len(numbers), totals, world, {str(i[0]) for i in items})


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute("SELECT type FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return found is not None and found[0] == "table"


def _rows(conn: sqlite3.Connection, table: str, where: str,
          params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    if not _has_table(conn, table):
        raise ResumeError(f"checkpoint has no `{table}` table")
    columns = ", ".join(SNAPSHOT_TABLES[table])
    return conn.execute(f"SELECT {columns} FROM main.{table} {where}", params).fetchall()
