"""The aggregator: untrusted SQLite snapshots validated, read safely, and loaded idempotently.

Snapshots are built here with `sqlite3` and the contract's own schema; the bad ones
are the ways a buggy or hostile sandbox could get them wrong.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from controller.db.schema import result_runs, result_steps
from controller.errors import SnapshotRejected
from controller.intake.aggregator import SnapshotRows, load_snapshot, read_snapshot
from sandbox_image.contract import SNAPSHOT_SCHEMA_SQL, SNAPSHOT_TABLES

LIMIT = 10 * 1024 * 1024
RUN_COLUMNS = SNAPSHOT_TABLES["runs"]
LOOSE_SCHEMA = """
CREATE TABLE runs (run_id, template_id, status, started_at, finished_at, cost_usd, tokens_used,
  llm_calls, entities_created, timepoints_created, mechanisms_used);
CREATE TABLE steps (run_id, step, duration_ms, actions, failures, cost_usd, tokens);
"""


def run_row(run_id: str = "r1", template_id: str = "board_meeting", **values: object
            ) -> tuple[object, ...]:
    row: dict[str, object] = {
        "run_id": run_id, "template_id": template_id, "status": "completed",
        "started_at": "2026-11-21T12:00:00Z", "finished_at": "2026-11-21T12:05:00Z",
        "cost_usd": 2.5, "tokens_used": 1000, "llm_calls": 12, "entities_created": 6,
        "timepoints_created": 7, "mechanisms_used": json.dumps(["M1", "M3"]),
    }
    row.update(values)
    return tuple(row[c] for c in RUN_COLUMNS)


def step_row(run_id: str = "r1", step: int = 1, **values: object) -> tuple[object, ...]:
    row: dict[str, object] = {"run_id": run_id, "step": step, "duration_ms": 120, "actions": 6,
                              "failures": 0, "cost_usd": 0.25, "tokens": 100}
    row.update(values)
    return tuple(row[c] for c in SNAPSHOT_TABLES["steps"])


@pytest.fixture
def snapshot(tmp_path: Path) -> Callable[..., bytes]:
    """Build a snapshot file with `schema`, `runs` and `steps` rows and extra SQL; its bytes."""
    counter = iter(range(10_000))

    def build(runs: list[tuple[object, ...]] | None = None,
              steps: list[tuple[object, ...]] | None = None,
              schema: str = SNAPSHOT_SCHEMA_SQL, extra_sql: str = "",
              setup: Callable[[sqlite3.Connection], None] | None = None) -> bytes:
        path = tmp_path / f"snapshot-{next(counter)}.sqlite"
        conn = sqlite3.connect(path)
        if setup:
            setup(conn)
        conn.executescript(schema)
        runs = [run_row()] if runs is None else runs
        steps = [step_row(step=1), step_row(step=2)] if steps is None else steps
        for table, rows in (("runs", runs), ("steps", steps)):
            if rows:
                columns = SNAPSHOT_TABLES[table]
                conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) "
                                 f"VALUES ({', '.join('?' * len(columns))})", rows)
        if extra_sql:
            conn.executescript(extra_sql)
        conn.commit()
        conn.close()
        return path.read_bytes()

    return build


def rejected(data: bytes, max_bytes: int = LIMIT) -> str:
    with pytest.raises(SnapshotRejected) as e:
        read_snapshot(data, max_bytes)
    assert e.value.code == "snapshot_rejected"
    assert e.value.status_code == 422
    return e.value.message


# --- valid snapshots -------------------------------------------------------------------


def test_valid_snapshot_is_read(snapshot) -> None:
    rows = read_snapshot(snapshot(), LIMIT)
    assert rows.runs == [dict(zip(RUN_COLUMNS, run_row(mechanisms_used='["M1", "M3"]'),
                                  strict=True))]
    assert sorted(rows.steps) == [step_row(step=1), step_row(step=2)]


def test_several_runs_and_nulls_are_accepted(snapshot) -> None:
    data = snapshot(runs=[run_row("r1"), run_row("r2", cost_usd=None, tokens_used=None,
                                                  started_at=None, mechanisms_used=None)],
                    steps=[step_row("r1", 1), step_row("r2", 1, duration_ms=None)])
    rows = read_snapshot(data, LIMIT)
    by_id = {r["run_id"]: r for r in rows.runs}
    assert set(by_id) == {"r1", "r2"}
    assert by_id["r2"]["cost_usd"] is None
    assert by_id["r2"]["mechanisms_used"] == "[]"
    assert len(rows.steps) == 2


def test_mechanisms_are_normalised_to_a_sorted_unique_array(snapshot) -> None:
    data = snapshot(runs=[run_row(mechanisms_used=json.dumps(["M3", "M1", "M3"]))])
    [run] = read_snapshot(data, LIMIT).runs
    assert json.loads(run["mechanisms_used"]) == ["M1", "M3"]


def test_integer_cost_is_accepted(snapshot) -> None:
    [run] = read_snapshot(snapshot(runs=[run_row(cost_usd=3)]), LIMIT).runs
    assert run["cost_usd"] == 3


def test_wal_mode_snapshot_is_accepted(snapshot) -> None:
    data = snapshot(setup=lambda conn: conn.execute("PRAGMA journal_mode=WAL"))
    assert len(read_snapshot(data, LIMIT).runs) == 1


def test_extra_tables_and_columns_are_ignored(snapshot) -> None:
    schema = SNAPSHOT_SCHEMA_SQL.replace("mechanisms_used TEXT", "mechanisms_used TEXT, "
                                         "secret TEXT DEFAULT 'hidden'")
    data = snapshot(schema=schema, extra_sql="""
        CREATE TABLE agents (name TEXT, mood TEXT);
        INSERT INTO agents VALUES ('holmes', 'curious');
    """)
    rows = read_snapshot(data, LIMIT)
    assert list(rows.runs[0]) == list(RUN_COLUMNS)
    assert "hidden" not in json.dumps(rows.runs)
    assert all(len(s) == len(SNAPSHOT_TABLES["steps"]) for s in rows.steps)


def test_columns_in_another_order_are_read_by_name(snapshot) -> None:
    schema = """
    CREATE TABLE runs (mechanisms_used TEXT, cost_usd REAL, run_id TEXT PRIMARY KEY,
      template_id TEXT, status TEXT, started_at TEXT, finished_at TEXT, tokens_used INTEGER,
      llm_calls INTEGER, entities_created INTEGER, timepoints_created INTEGER);
    CREATE TABLE steps (run_id TEXT, step INTEGER, duration_ms INTEGER, actions INTEGER,
      failures INTEGER, cost_usd REAL, tokens INTEGER);
    """
    data = snapshot(schema=schema, runs=[], extra_sql="""
        INSERT INTO runs (run_id, template_id, status, cost_usd, mechanisms_used)
        VALUES ('r9', 'kami_shrine', 'completed', 1.75, '["M16"]');
    """)
    [run] = read_snapshot(data, LIMIT).runs
    assert (run["run_id"], run["template_id"], run["cost_usd"]) == ("r9", "kami_shrine", 1.75)
    assert run["mechanisms_used"] == '["M16"]'


# --- rejected snapshots ----------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"not a database at all", b"PK\x03\x04zipfile",
                                  b"SQLite format 2\x00" + b"\x00" * 100])
def test_non_sqlite_bytes_are_rejected(data: bytes) -> None:
    assert "not an SQLite 3 file" in rejected(data)


def test_over_max_bytes_is_rejected_before_reading(snapshot) -> None:
    data = snapshot()
    message = rejected(data, max_bytes=len(data) - 1)
    assert str(len(data)) in message
    assert str(len(data) - 1) in message
    assert "not an SQLite" in rejected(b"x" * 10, max_bytes=10)  # exactly at the limit is read
    assert "over the" in rejected(b"x" * 11, max_bytes=10)


@pytest.mark.parametrize("keep", [100, 1024, 4096, 0.5])
def test_truncated_snapshot_is_rejected(snapshot, keep: float) -> None:
    data = snapshot(steps=[step_row(step=n) for n in range(1, 400)])
    cut = int(len(data) * keep) if isinstance(keep, float) else keep
    message = rejected(data[:cut])
    assert "malformed" in message or "integrity" in message


def test_corrupted_pages_are_rejected(snapshot) -> None:
    data = bytearray(snapshot(steps=[step_row(step=n) for n in range(1, 400)]))
    page_size = int.from_bytes(data[16:18], "big")
    for index in range(page_size, len(data)):
        data[index] = 0xA5
    message = rejected(bytes(data))
    assert "malformed" in message or "integrity" in message


@pytest.mark.parametrize("table", ["runs", "steps"])
def test_missing_table_is_rejected(snapshot, table: str) -> None:
    kept = [s for s in SNAPSHOT_SCHEMA_SQL.split(";") if f"EXISTS {table} (" not in s]
    data = snapshot(schema=";".join(kept), **{table: []})
    assert f"no `{table}` table" in rejected(data)


def test_missing_column_is_rejected(snapshot) -> None:
    schema = SNAPSHOT_SCHEMA_SQL.replace("llm_calls INTEGER,", "")
    data = snapshot(schema=schema, runs=[], extra_sql="""
        INSERT INTO runs (run_id, template_id, status) VALUES ('r1', 't', 'completed');""")
    message = rejected(data)
    assert "`runs`" in message
    assert "llm_calls" in message


def test_runs_as_a_view_is_rejected(snapshot) -> None:
    schema = SNAPSHOT_SCHEMA_SQL.replace("EXISTS runs (", "EXISTS real_runs (")
    data = snapshot(schema=schema, runs=[], extra_sql="""
        INSERT INTO real_runs (run_id, template_id, status) VALUES ('r1', 't', 'completed');
        CREATE VIEW runs AS SELECT * FROM real_runs;""")
    assert "view `runs`" in rejected(data)


@pytest.mark.parametrize(("table", "column", "value"), [
    ("runs", "cost_usd", "twelve dollars"),
    ("runs", "tokens_used", "many"),
    ("runs", "template_id", b"\x00\x01"),
    ("runs", "template_id", None),
    ("runs", "status", 7),
    ("runs", "cost_usd", float("inf")),
    ("steps", "step", "first"),
    ("steps", "cost_usd", "cheap"),
])
def test_wrong_types_are_rejected(snapshot, table: str, column: str, value: object) -> None:
    if table == "runs":
        data = snapshot(schema=LOOSE_SCHEMA, runs=[run_row(**{column: value})])
    else:
        data = snapshot(schema=LOOSE_SCHEMA, steps=[step_row(**{column: value})])
    assert f"`{table}.{column}`" in rejected(data)


@pytest.mark.parametrize("mechanisms", ["M1, M3", "[M1", '{"M1": true}', '"M1"', "[1, 2]"])
def test_bad_mechanisms_used_is_rejected(snapshot, mechanisms: str) -> None:
    data = snapshot(runs=[run_row(mechanisms_used=mechanisms)])
    assert "mechanisms_used" in rejected(data)


def test_empty_runs_table_is_rejected(snapshot) -> None:
    assert "`runs` table is empty" in rejected(snapshot(runs=[], steps=[]))


def test_duplicate_run_ids_are_rejected(snapshot) -> None:
    data = snapshot(schema=LOOSE_SCHEMA, runs=[run_row("r1"), run_row("r1")], steps=[])
    assert "r1" in rejected(data)


# --- hostile snapshots -----------------------------------------------------------------


# json() is a built-in SQLite does not mark innocuous: with `trusted_schema` off it may not
# run from a schema (generated column, view, trigger, index); with it on, it would.
UNSAFE_IN_SCHEMA = "json('[\"M1\"]')"


def test_sqlite_refuses_json_in_a_schema_without_trusted_schema() -> None:
    """The premise of the next test, checked on this SQLite: it fails if SQLite changes."""
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE TABLE t (x, y GENERATED ALWAYS AS ({UNSAFE_IN_SCHEMA}) VIRTUAL)")
    conn.execute("INSERT INTO t (x) VALUES (1)")
    assert conn.execute("SELECT y FROM t").fetchall() == [('["M1"]',)]
    conn.execute("PRAGMA trusted_schema=OFF")
    with pytest.raises(sqlite3.OperationalError, match="unsafe use of json"):
        conn.execute("SELECT y FROM t").fetchall()


@pytest.mark.parametrize("schema_code", [
    f"CREATE INDEX costly ON steps ({UNSAFE_IN_SCHEMA}, step);",
    f"CREATE INDEX partial ON runs (run_id) WHERE {UNSAFE_IN_SCHEMA} IS NOT NULL;",
    f"CREATE TABLE extra (x, y GENERATED ALWAYS AS ({UNSAFE_IN_SCHEMA}) VIRTUAL);",
])
def test_a_function_called_from_the_schema_is_refused(snapshot, schema_code: str) -> None:
    """Schema code (indexes, generated columns) that the reader could run: refused, with
    triggers and a view alongside. Trusting the schema would read it."""
    data = snapshot(extra_sql=schema_code + f"""
        CREATE TABLE audit (note TEXT);
        CREATE TRIGGER spy AFTER INSERT ON runs BEGIN INSERT INTO audit VALUES ('fired'); END;
        CREATE VIEW evil AS SELECT {UNSAFE_IN_SCHEMA} AS x;
    """)
    rejected(data)


def test_generated_column_calling_an_unknown_function_is_rejected(snapshot) -> None:
    def register(conn: sqlite3.Connection) -> None:
        conn.create_function("exfiltrate", 1, lambda value: 1.0, deterministic=True)

    schema = SNAPSHOT_SCHEMA_SQL.replace(
        "cost_usd REAL, tokens_used",
        "cost_usd REAL GENERATED ALWAYS AS (exfiltrate(run_id)) VIRTUAL, tokens_used")
    columns = [c for c in RUN_COLUMNS if c != "cost_usd"]
    values = {c: v for c, v in zip(RUN_COLUMNS, run_row(), strict=True) if c != "cost_usd"}
    data = snapshot(schema=schema, setup=register, runs=[], extra_sql=(
        f"INSERT INTO runs ({', '.join(columns)}) VALUES ("
        + ", ".join(f"'{v}'" if isinstance(v, str) else str(v) for v in values.values())
        + ");"))
    message = rejected(data)  # a clean rejection, not an sqlite3 error
    assert "exfiltrate" in message or "cost_usd" in message


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch) -> Iterator[Path]:
    directory = tmp_path / "private"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    yield directory


def test_private_copy_is_removed_after_reading(snapshot, private_tmp: Path) -> None:
    read_snapshot(snapshot(), LIMIT)
    rejected(snapshot(runs=[], steps=[]))
    rejected(b"SQLite format 3\x00" + b"\xff" * 2000)
    assert list(private_tmp.iterdir()) == []


# --- loading ---------------------------------------------------------------------------


def counts(engine: Engine, sandbox_id: str) -> tuple[int, int]:
    with engine.connect() as conn:
        runs = conn.execute(select(func.count()).select_from(result_runs)
                            .where(result_runs.c.sandbox_id == sandbox_id)).scalar_one()
        steps = conn.execute(select(func.count()).select_from(result_steps)
                             .where(result_steps.c.sandbox_id == sandbox_id)).scalar_one()
    return runs, steps


def load(engine: Engine, run_id: str, sandbox_id: str, rows: SnapshotRows) -> None:
    with engine.begin() as conn:
        load_snapshot(conn, run_id, sandbox_id, rows)


def test_load_is_idempotent(engine: Engine, snapshot) -> None:
    rows = read_snapshot(snapshot(runs=[run_row("r1"), run_row("r2", cost_usd=1.25)],
                                  steps=[step_row("r1", 1), step_row("r1", 2),
                                         step_row("r2", 1)]), LIMIT)
    load(engine, "run-a", "sb-1", rows)
    load(engine, "run-a", "sb-1", rows)
    assert counts(engine, "sb-1") == (2, 3)
    with engine.connect() as conn:
        loaded = conn.execute(select(result_runs).where(result_runs.c.sandbox_id == "sb-1")
                              .order_by(result_runs.c.snapshot_run_id)).all()
    assert [(r.snapshot_run_id, r.run_id, r.cost_usd) for r in loaded] == [
        ("r1", "run-a", 2.5), ("r2", "run-a", 1.25)]
    assert json.loads(loaded[0].mechanisms_used) == ["M1", "M3"]


def test_load_replaces_the_sandbox_rows_only(engine: Engine, snapshot) -> None:
    first = read_snapshot(snapshot(runs=[run_row("r1"), run_row("r2")],
                                   steps=[step_row("r1", n) for n in range(1, 6)]), LIMIT)
    later = read_snapshot(snapshot(runs=[run_row("r3", cost_usd=9.0)],
                                   steps=[step_row("r3", 1)]), LIMIT)
    load(engine, "run-a", "sb-1", first)
    load(engine, "run-a", "sb-2", first)
    load(engine, "run-a", "sb-1", later)  # e.g. the final snapshot after a checkpoint
    assert counts(engine, "sb-1") == (1, 1)
    assert counts(engine, "sb-2") == (2, 5)
    with engine.connect() as conn:
        total = conn.execute(select(func.sum(result_runs.c.cost_usd))
                             .where(result_runs.c.sandbox_id == "sb-1")).scalar_one()
    assert total == 9.0


def test_load_without_steps(engine: Engine, snapshot) -> None:
    load(engine, "run-a", "sb-1", read_snapshot(snapshot(steps=[]), LIMIT))
    assert counts(engine, "sb-1") == (1, 0)
