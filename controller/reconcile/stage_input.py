"""The SQLite file a later stage's sandboxes read through SIMPLE_INPUT_URL.

It holds the previous stage's aggregated rows: `sandboxes` (every sandbox of
that stage with its status, also those that failed), `runs` and `steps` (the
snapshot schema plus `sandbox_id`), and `items` when the controller keeps
per-item results. The controller writes it once, when the stage before has
settled, into the store at `inputs/<run>/stage-<n>.sqlite`.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Iterable
from pathlib import Path

from sqlalchemy import Connection, Table, select

from controller.db.schema import metadata, result_runs, result_steps, sandboxes
from controller.errors import InputError
from sandbox_image.contract import SNAPSHOT_TABLES

MAX_INPUT_ROWS = 1_000_000
ITEMS_TABLE = "result_items"  # per-item results, when the controller keeps them
_SKIPPED_COLUMNS = ("run_id", "snapshot_run_id")


def build_stage_input(conn: Connection, run_id: str, stage: int) -> Path:
    """The input file of stage `stage`: the rows of stage `stage - 1`, in a private
    temporary file the caller stores (never read whole into memory) and removes."""
    members = conn.execute(
        select(
            sandboxes.c.id,
            sandboxes.c.template_id,
            sandboxes.c.stage,
            sandboxes.c.status,
            sandboxes.c.exit_code,
            sandboxes.c.error,
        )
        .where(sandboxes.c.run_id == run_id, sandboxes.c.stage == stage - 1)
        .order_by(sandboxes.c.position)
    ).all()
    ids = [m.id for m in members]
    fd, path = tempfile.mkstemp(prefix="simple-input-", suffix=".sqlite")
    os.close(fd)
    try:
        out = sqlite3.connect(path)
        try:
            out.execute(
                "CREATE TABLE sandboxes (sandbox_id TEXT PRIMARY KEY, template_id TEXT NOT NULL, "
                "stage INTEGER NOT NULL, status TEXT NOT NULL, exit_code INTEGER, error TEXT)"
            )
            out.executemany("INSERT INTO sandboxes VALUES (?, ?, ?, ?, ?, ?)", members)
            _copy(out, "runs", conn, result_runs, ids, SNAPSHOT_TABLES["runs"])
            _copy(out, "steps", conn, result_steps, ids, SNAPSHOT_TABLES["steps"])
            items = metadata.tables.get(ITEMS_TABLE)
            if items is not None and "sandbox_id" in items.c:
                columns = tuple(c.name for c in items.c if c.name not in _SKIPPED_COLUMNS)
                _copy(
                    out, "items", conn, items, ids, tuple(c for c in columns if c != "sandbox_id")
                )
            out.commit()
        finally:
            out.close()
    except BaseException:
        os.unlink(path)
        raise
    return Path(path)


def _copy(
    out: sqlite3.Connection,
    name: str,
    conn: Connection,
    table: Table,
    ids: list[str],
    columns: Iterable[str],
) -> None:
    """Copy the stage's rows of `table` into `name` (sandbox_id first, then `columns`)."""
    wanted = ["sandbox_id", *columns]
    # In the controller's tables the snapshot's own run id is `snapshot_run_id`.
    source = [
        table.c.snapshot_run_id if c == "run_id" and "snapshot_run_id" in table.c else table.c[c]
        for c in wanted
    ]
    out.execute(f"CREATE TABLE {name} ({', '.join(wanted)})")
    if not ids:
        return
    rows = conn.execute(
        select(*source).where(table.c.sandbox_id.in_(ids)).limit(MAX_INPUT_ROWS + 1)
    ).all()
    if len(rows) > MAX_INPUT_ROWS:
        raise InputError(
            f"the previous stage has more than {MAX_INPUT_ROWS} {name} rows, too many to pass on",
            hint="keep fewer rows per sandbox, or split the stage",
        )
    placeholders = ", ".join("?" for _ in wanted)
    out.executemany(f"INSERT INTO {name} VALUES ({placeholders})", [tuple(r) for r in rows])
