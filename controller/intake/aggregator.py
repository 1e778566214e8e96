"""Aggregation: a sandbox's snapshot, treated as untrusted input, folded into the database.

The snapshot is copied to a private temporary file and opened read-only and
immutable under a CPU and memory budget (`controller.intake.snapshot_guard`); its schema
must pass the contract's allowlist before any row is read, then SQLite's quick
check on the contract tables, a size limit, and values of the right types. Only
the contract's columns are read. A rejected snapshot loads nothing. Loading
replaces the sandbox's earlier rows in one transaction, so repeating it is harmless.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import tempfile
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, delete, insert

from controller.db.schema import result_runs, result_steps
from controller.errors import SnapshotRejected
from controller.intake.snapshot_guard import CPU_BUDGET_S, check_schema, open_under_budget
from controller.intake.snapshot_items import load_items, read_items
from sandbox_image.contract import OPTIONAL_SNAPSHOT_TABLES, SNAPSHOT_COLUMN_TYPES, SNAPSHOT_TABLES

SQLITE_HEADER = b"SQLite format 3\x00"
# Every step row becomes a Python tuple before loading: this bounds the reader's memory.
MAX_STEP_ROWS = 200_000
MAX_RUN_ROWS = 10_000

_RUN_TYPES = {
    "run_id": str,
    "template_id": str,
    "status": str,
    "started_at": (str, type(None)),
    "finished_at": (str, type(None)),
    "cost_usd": (int, float, type(None)),
    "tokens_used": (int, type(None)),
    "llm_calls": (int, type(None)),
    "entities_created": (int, type(None)),
    "timepoints_created": (int, type(None)),
    "mechanisms_used": (str, type(None)),
}
_STEP_TYPES = {
    "run_id": str,
    "step": int,
    "duration_ms": (int, type(None)),
    "actions": (int, type(None)),
    "failures": (int, type(None)),
    "cost_usd": (int, float, type(None)),
    "tokens": (int, type(None)),
}


@dataclass(frozen=True)
class SnapshotRows:
    runs: list[dict[str, Any]]
    steps: list[tuple[Any, ...]]
    items: list[tuple[Any, ...]] = field(default_factory=list)


def read_snapshot(data: bytes, max_bytes: int, cpu_s: float = CPU_BUDGET_S) -> SnapshotRows:
    """Validate an untrusted snapshot and return its contract rows, or raise SnapshotRejected."""
    if len(data) > max_bytes:
        raise SnapshotRejected(
            f"snapshot is {len(data)} bytes, over the {max_bytes}-byte limit",
            hint="keep snapshots small or raise SIMPLE_SNAPSHOT_MAX_BYTES",
        )
    if not data.startswith(SQLITE_HEADER):
        raise SnapshotRejected(
            "snapshot is not an SQLite 3 file", hint="PUT the SQLite database file itself"
        )
    fd, path = tempfile.mkstemp(prefix="simple-snapshot-", suffix=".sqlite")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return _read_private_copy(path, cpu_s)
    finally:
        os.unlink(path)


def read_snapshot_file(path: str, max_bytes: int, cpu_s: float = CPU_BUDGET_S) -> SnapshotRows:
    """`read_snapshot` of a private file the controller spooled the snapshot to (never
    the whole object in memory)."""
    size = os.path.getsize(path)
    if size > max_bytes:
        raise SnapshotRejected(
            f"snapshot is {size} bytes, over the {max_bytes}-byte limit",
            hint="keep snapshots small or raise SIMPLE_SNAPSHOT_MAX_BYTES",
        )
    with open(path, "rb") as handle:
        if handle.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
            raise SnapshotRejected(
                "snapshot is not an SQLite 3 file", hint="PUT the SQLite database file itself"
            )
    return _read_private_copy(path, cpu_s)


def _read_private_copy(path: str, cpu_s: float) -> SnapshotRows:
    try:
        with open_under_budget(path, cpu_s) as conn:
            check_schema(conn, SNAPSHOT_COLUMN_TYPES)
            _check_tables(conn)
            for table in _present_tables(conn):
                check = conn.execute(f'PRAGMA main.quick_check("{table}")').fetchall()
                if check != [("ok",)]:
                    raise SnapshotRejected(f"snapshot failed the integrity check: {check[0][0]}")
            runs = [
                _typed(dict(zip(SNAPSHOT_TABLES["runs"], r, strict=True)), _RUN_TYPES, "runs")
                for r in _select(conn, "runs", limit=MAX_RUN_ROWS + 1)
            ]
            steps = _checked_steps(conn)
            items = read_items(conn)
    except sqlite3.DatabaseError as e:
        raise SnapshotRejected(f"snapshot is not a readable SQLite database: {e}") from e
    if not runs:
        raise SnapshotRejected(
            "snapshot's `runs` table is empty", hint="write one row per run into `runs`"
        )
    run_ids = [r["run_id"] for r in runs]
    if len(set(run_ids)) != len(run_ids):
        repeated = next(r for r in run_ids if run_ids.count(r) > 1)
        raise SnapshotRejected(
            f"snapshot's `runs` table repeats run_id {repeated!r:.60}",
            hint="run_id is the primary key of `runs`",
        )
    if len({(s[0], s[1]) for s in steps}) != len(steps):
        raise SnapshotRejected(
            "snapshot's `steps` table repeats a (run_id, step)",
            hint="(run_id, step) is the primary key of `steps`",
        )
    if len(runs) > MAX_RUN_ROWS:
        raise SnapshotRejected(f"snapshot has more than {MAX_RUN_ROWS} rows in `runs`")
    if len(steps) > MAX_STEP_ROWS:
        raise SnapshotRejected(
            f"snapshot has more than {MAX_STEP_ROWS} step rows",
            hint="record fewer, coarser steps",
        )
    for run in runs:
        run["mechanisms_used"] = _mechanisms(run["mechanisms_used"])
    return SnapshotRows(runs=runs, steps=steps, items=items)


def _present_tables(conn: sqlite3.Connection) -> list[str]:
    """The contract tables in the file (the optional ones may be absent)."""
    return [t for t in SNAPSHOT_TABLES if t not in OPTIONAL_SNAPSHOT_TABLES or conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (t,)).fetchone()]


def _check_tables(conn: sqlite3.Connection) -> None:
    for table, columns in SNAPSHOT_TABLES.items():
        if table in OPTIONAL_SNAPSHOT_TABLES:
            continue  # checked by their own readers
        kind = conn.execute("SELECT type FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        if kind is None or kind[0] != "table":
            raise SnapshotRejected(
                f"snapshot has no `{table}` table",
                hint="create the tables of the snapshot schema in docs/architecture.md",
            )
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        missing = [c for c in columns if c not in present]
        if missing:
            raise SnapshotRejected(
                f"snapshot's `{table}` table lacks columns: {', '.join(missing)}",
                hint="create the tables of the snapshot schema in docs/architecture.md",
            )


def _select(conn: sqlite3.Connection, table: str, limit: int | None = None) -> list[Any]:
    columns = ", ".join(f'"{c}"' for c in SNAPSHOT_TABLES[table])
    sql = f'SELECT {columns} FROM main."{table}" NOT INDEXED'
    return conn.execute(sql + (f" LIMIT {limit}" if limit else "")).fetchall()


def _checked_steps(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    """The step rows as tuples, after `_typed`'s checks made by SQLite in one scan.

    Snapshots hold many step rows: checking each in Python would cost more than
    loading it. SQLite finds the first row `_typed` would refuse, and `_typed` says why.
    """
    columns = SNAPSHOT_TABLES["steps"]
    bad = conn.execute(
        f"SELECT {', '.join(columns)} FROM main.steps NOT INDEXED "
        f"WHERE {_refused_sql(_STEP_TYPES)} LIMIT 1"
    ).fetchone()
    if bad is not None:
        _typed(dict(zip(columns, bad, strict=True)), _STEP_TYPES, "steps")
        raise SnapshotRejected(f"snapshot's `steps` holds an invalid row: {bad!r:.200}")
    return _select(conn, "steps", limit=MAX_STEP_ROWS + 1)


def _refused_sql(types: dict[str, Any]) -> str:
    """An SQLite condition true for every row `_typed(row, types, ...)` refuses."""
    valid = []
    for column, expected in types.items():
        kinds = expected if isinstance(expected, tuple) else (expected,)
        name = f'"{column}"'
        accepted = []
        if str in kinds:
            accepted.append(
                f"(typeof({name}) = 'text' AND length({name}) <= {_MAX_TEXT.get(column, 0)})"
            )
        if float in kinds:  # integers too: SQLite stores 3.0 in an untyped column as 3
            accepted.append(
                f"(typeof({name}) IN ('integer', 'real') AND {name} BETWEEN 0 "
                "AND 1.7976931348623157e308)"
            )
        elif int in kinds:
            accepted.append(
                f"(typeof({name}) = 'integer' AND {name} BETWEEN 0 AND "
                f"{_MAX_INT.get(column, 2**63 - 1)})"
            )
        if type(None) in kinds:
            accepted.append(f"{name} IS NULL")
        valid.append("(" + " OR ".join(accepted) + ")")
    return "NOT (" + " AND ".join(valid) + ")"


# Largest integer accepted per column, when less than 64 bits (what the tables hold).
_MAX_INT = {"step": 2**31 - 1}
# Longest text accepted per column (what the controller's tables hold).
_MAX_TEXT = {
    "run_id": 200,
    "template_id": 100,
    "status": 20,
    "started_at": 64,
    "finished_at": 64,
    "mechanisms_used": 4000,
}


def _typed(row: dict[str, Any], types: dict[str, Any], table: str) -> dict[str, Any]:
    for column, expected in types.items():
        value = row[column]
        if isinstance(value, str) and len(value) > _MAX_TEXT.get(column, 0):
            raise SnapshotRejected(
                f"snapshot's `{table}.{column}` is {len(value)} characters long, over the "
                f"{_MAX_TEXT.get(column, 0)} allowed"
            )
        if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
            raise SnapshotRejected(f"snapshot's `{table}.{column}` is negative ({value})")
        if isinstance(value, int) and value > _MAX_INT.get(column, 2**63 - 1):
            raise SnapshotRejected(
                f"snapshot's `{table}.{column}` is {value}, over the largest allowed "
                f"({_MAX_INT.get(column, 2**63 - 1)})"
            )
        if isinstance(value, bool) or not isinstance(value, expected):
            raise SnapshotRejected(
                f"snapshot's `{table}.{column}` holds {type(value).__name__} {value!r:.40}, "
                f"not the schema's type",
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise SnapshotRejected(f"snapshot's `{table}.{column}` holds a non-finite number")
    return row


def _mechanisms(raw: str | None) -> str:
    if raw is None:
        return "[]"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise SnapshotRejected(f"snapshot's `runs.mechanisms_used` is not JSON: {e}") from e
    if not isinstance(value, list) or not all(isinstance(m, str) and len(m) <= 20 for m in value):
        raise SnapshotRejected("snapshot's `runs.mechanisms_used` is not a JSON array of names")
    return json.dumps(sorted(set(value)))


def load_snapshot(conn: Connection, run_id: str, sandbox_id: str, rows: SnapshotRows) -> None:
    """Replace the sandbox's result rows with these (inside the caller's transaction)."""
    conn.execute(delete(result_steps).where(result_steps.c.sandbox_id == sandbox_id))
    conn.execute(delete(result_runs).where(result_runs.c.sandbox_id == sandbox_id))
    conn.execute(
        insert(result_runs),
        [
            {
                **{k: v for k, v in r.items() if k != "run_id"},
                "snapshot_run_id": r["run_id"],
                "sandbox_id": sandbox_id,
                "run_id": run_id,
            }
            for r in rows.runs
        ],
    )
    load_items(conn, run_id, sandbox_id, rows.runs[0]["template_id"], rows.items)
    if rows.steps:
        if conn.dialect.name == "postgresql":
            _copy_steps(conn, run_id, sandbox_id, rows.steps)
        else:
            conn.execute(
                insert(result_steps),
                [
                    {
                        "sandbox_id": sandbox_id,
                        "run_id": run_id,
                        "snapshot_run_id": s[0],
                        "step": s[1],
                        "duration_ms": s[2],
                        "actions": s[3],
                        "failures": s[4],
                        "cost_usd": s[5],
                        "tokens": s[6],
                    }
                    for s in rows.steps
                ],
            )


def _copy_steps(
    conn: Connection, run_id: str, sandbox_id: str, steps: list[tuple[Any, ...]]
) -> None:
    """PostgreSQL: COPY the step rows in binary, in the caller's transaction.

    Far faster than INSERT for big snapshots; binary spares both sides formatting and
    parsing text. The types are the columns' (the rows passed `_typed`'s checks).
    """
    driver = conn.connection.driver_connection
    assert driver is not None
    columns = (
        "sandbox_id, run_id, snapshot_run_id, step, duration_ms, actions, failures, "
        "cost_usd, tokens"
    )
    with (
        driver.cursor() as cursor,
        cursor.copy(f"COPY result_steps ({columns}) FROM STDIN (FORMAT BINARY)") as copy,
    ):
        copy.set_types(_COPY_TYPES)
        for s in steps:
            copy.write_row((sandbox_id, run_id, *s))


_COPY_TYPES = ["varchar", "varchar", "varchar", "int4", "int8", "int8", "int8", "float8", "int8"]
