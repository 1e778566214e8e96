"""The snapshot's optional `items` table (batch templates): checked, then loaded.

Like the rest of a snapshot it is untrusted: only the contract's columns are
read, every value is type- and size-checked by SQLite in one scan, `status`
must be one of the contract's, `data` must be JSON, and the row count is
capped. A table that is absent means "not a batch sandbox" and loads nothing.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from sqlalchemy import Connection, delete, insert

from controller.db.schema import result_items
from controller.errors import SnapshotRejected
from sandbox_image.contract import ITEM_STATUSES, SNAPSHOT_TABLES

MAX_ITEM_ROWS = 50_000
MAX_ITEM_TEXT_BYTES = 64 << 20  # all of the rows' text together: bounds the reader's memory
# Longest text accepted per column; `data` is an item's input (at most 512 KiB), echoed back.
ITEM_TEXT_LIMITS = {"item_id": 200, "status": 20, "reason": 2000, "error": 4000,
                    "data": 640_000}
_COLUMNS = SNAPSHOT_TABLES["items"]


def _valid_sql() -> str:
    """An SQLite condition true exactly for the rows this module accepts."""
    text = {c: f"(typeof({c}) = 'text' AND length({c}) <= {n})"
            for c, n in ITEM_TEXT_LIMITS.items()}
    statuses = ", ".join(f"'{s}'" for s in ITEM_STATUSES)
    return " AND ".join([
        text["item_id"],
        f"(typeof(status) = 'text' AND status IN ({statuses}))",
        "(passed IS NULL OR (typeof(passed) = 'integer' AND passed IN (0, 1)))",
        f"(reason IS NULL OR {text['reason']})",
        f"(error IS NULL OR {text['error']})",
        "(duration_ms IS NULL OR (typeof(duration_ms) = 'integer' AND duration_ms BETWEEN 0 "
        "AND 9223372036854775807))",
        f"(data IS NULL OR ({text['data']} AND json_valid(data)))",
    ])


def read_items(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    """The checked `items` rows of an opened snapshot; [] when it has no `items` table."""
    kind = conn.execute("SELECT type FROM sqlite_master WHERE name = 'items'").fetchone()
    if kind is None:
        return []
    if kind[0] != "table":
        raise SnapshotRejected("snapshot's `items` is not a table")
    present = {row[1] for row in conn.execute("PRAGMA table_info(items)")}
    missing = [c for c in _COLUMNS if c not in present]
    if missing:
        raise SnapshotRejected(
            f"snapshot's `items` table lacks columns: {', '.join(missing)}",
            hint="create `items` as in the contract (docs/batch.md)",
        )
    columns = ", ".join(f'"{c}"' for c in _COLUMNS)
    bad = conn.execute(
        f"SELECT {columns} FROM main.items WHERE NOT ({_valid_sql()}) LIMIT 1"
    ).fetchone()
    if bad is not None:
        raise SnapshotRejected(
            f"snapshot's `items` holds an invalid row: {_describe(bad)}",
            hint="status is succeeded|failed|skipped, passed 0/1, data JSON text",
        )
    count, size = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(length(item_id) + length(status) + "
        "COALESCE(length(reason), 0) + COALESCE(length(error), 0) + "
        "COALESCE(length(data), 0)), 0) FROM main.items").fetchone()
    if count > MAX_ITEM_ROWS:
        raise SnapshotRejected(f"snapshot has more than {MAX_ITEM_ROWS} item rows")
    if size > MAX_ITEM_TEXT_BYTES:
        raise SnapshotRejected(f"snapshot's `items` hold {size} characters of text, over "
                               f"the {MAX_ITEM_TEXT_BYTES} allowed",
                               hint="keep item data small; the controller has the inputs")
    rows = conn.execute(f"SELECT {columns} FROM main.items LIMIT {MAX_ITEM_ROWS + 1}").fetchall()
    if len(rows) > MAX_ITEM_ROWS:
        raise SnapshotRejected(f"snapshot has more than {MAX_ITEM_ROWS} item rows")
    if len({r[0] for r in rows}) != len(rows):
        raise SnapshotRejected("snapshot's `items` table repeats an item_id",
                               hint="item_id is the primary key of `items`")
    return rows


def _describe(row: tuple[Any, ...]) -> str:
    shown = {c: (v if not isinstance(v, str) else v[:60]) for c, v in zip(_COLUMNS, row,
                                                                              strict=True)}
    return json.dumps(shown, default=repr)[:300]


def load_items(conn: Connection, run_id: str, sandbox_id: str, template_id: str,
               rows: list[tuple[Any, ...]]) -> None:
    """Replace the sandbox's item rows with these (inside the caller's transaction)."""
    conn.execute(delete(result_items).where(result_items.c.sandbox_id == sandbox_id))
    if not rows:
        return
    conn.execute(insert(result_items), [
        {"sandbox_id": sandbox_id, "run_id": run_id, "template_id": template_id,
         **dict(zip(_COLUMNS, r, strict=True))}
        for r in rows
    ])
