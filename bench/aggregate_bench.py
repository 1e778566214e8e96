"""Snapshot aggregation on PostgreSQL: SIMPLE's path against a bare COPY and row-by-row INSERT.

Writes 64 snapshot files (the contract's SQLite schema) of 20,000 step rows each,
then, in every round and on an emptied `result_steps`, loads all of them three ways,
one transaction per snapshot:

- SIMPLE: the aggregator as the finisher runs it: `read_snapshot` (private copy,
  integrity check, schema and type checks) then `load_snapshot` (replace the
  sandbox's rows: DELETE, INSERT the run, COPY the steps);
- minimal COPY: a script that opens each file with sqlite3, selects the same rows
  and COPYs them (no checks, no delete), in text (psycopg's default) and in binary
  (as SIMPLE does); the target compares SIMPLE with the faster of the two;
- row-by-row INSERT: the same rows, one INSERT statement and one round trip per
  row, as row-at-a-time code does; and psycopg's executemany, which pipelines those
  INSERTs (one statement per row, few round trips). Both are slow, so they run on
  the first --insert-snapshots snapshots and their time is scaled to all of them
  (their cost per row is flat).

A last line times SIMPLE loading every snapshot again over its existing rows
(idempotent: the row count must not change). Prints medians over the rounds and
the ratios. Targets: SIMPLE <= 1.5x the minimal COPY, >= 10x faster than row-by-row.

    python -m bench.aggregate_bench [--snapshots 64] [--rows 20000] [--rounds 3]

The database: SIMPLE_BENCH_DATABASE_URL (a scratch database is created on that
server and dropped afterwards), else a durable throwaway server started with
scripts/start-postgres.sh and stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, insert, select, text

from bench.ingest_bench import bench_database
from controller.db.engine import create_db_engine, upgrade
from controller.db.schema import result_runs, result_steps, runs
from controller.intake.aggregator import load_snapshot, read_snapshot
from sandbox_image.contract import SNAPSHOT_SCHEMA_SQL

RUN_ID = "run-aggregate-bench"
STEP_COLUMNS = "sandbox_id, run_id, snapshot_run_id, step, duration_ms, actions, failures, " \
               "cost_usd, tokens"
MAX_BYTES = 512 * 1024 * 1024


def write_snapshots(directory: Path, count: int, rows: int) -> list[Path]:
    """`count` snapshot files of `rows` step rows each, as a sandbox writes them."""
    rng = random.Random(7)
    paths = []
    for number in range(count):
        sandbox_id = f"agg-sbx-{number:03d}"
        path = directory / f"{sandbox_id}.sqlite"
        conn = sqlite3.connect(path)
        conn.executescript(SNAPSHOT_SCHEMA_SQL)
        steps = [(sandbox_id, step, rng.randint(10, 5000), rng.randint(1, 40),
                  rng.randint(0, 3), round(rng.uniform(0, 0.05), 6), rng.randint(0, 4000))
                 for step in range(1, rows + 1)]
        conn.executemany("INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?)", steps)
        conn.execute(
            "INSERT INTO runs VALUES (?, 'bench', 'completed', '2026-11-21T00:00:00Z', "
            "'2026-11-21T01:00:00Z', ?, ?, ?, ?, ?, ?)",
            (sandbox_id, sum(s[5] for s in steps), sum(s[6] for s in steps), rows, 6, rows,
             '["M1", "M7", "M13"]'))
        conn.commit()
        conn.close()
        paths.append(path)
    return paths


def simple_load(engine: Engine, paths: list[Path]) -> None:
    for path in paths:
        rows = read_snapshot(path.read_bytes(), MAX_BYTES)
        with engine.begin() as conn:
            load_snapshot(conn, RUN_ID, path.stem, rows)


def _driver(conn: Any) -> Any:
    return conn.connection.driver_connection


def minimal_copy(engine: Engine, paths: list[Path], binary: bool = False) -> None:
    options = " (FORMAT BINARY)" if binary else ""
    for path in paths:
        snapshot = sqlite3.connect(path)
        steps = snapshot.execute("SELECT run_id, step, duration_ms, actions, failures, "
                                 "cost_usd, tokens FROM steps").fetchall()
        snapshot.close()
        with engine.begin() as conn, _driver(conn).cursor() as cursor, \
                cursor.copy(f"COPY result_steps ({STEP_COLUMNS}) FROM STDIN{options}") as copy:
            if binary:
                copy.set_types(["varchar", "varchar", "varchar", "int4", "int8", "int8", "int8",
                                "float8", "int8"])
            for step in steps:
                copy.write_row((path.stem, RUN_ID, *step))


def minimal_binary_copy(engine: Engine, paths: list[Path]) -> None:
    minimal_copy(engine, paths, binary=True)


INSERT_SQL = f"INSERT INTO result_steps ({STEP_COLUMNS}) VALUES ({', '.join(['%s'] * 9)})"


def _steps(path: Path) -> list[tuple[Any, ...]]:
    snapshot = sqlite3.connect(path)
    steps = snapshot.execute("SELECT run_id, step, duration_ms, actions, failures, "
                             "cost_usd, tokens FROM steps").fetchall()
    snapshot.close()
    return [(path.stem, RUN_ID, *step) for step in steps]


def row_by_row(engine: Engine, paths: list[Path]) -> None:
    for path in paths:
        with engine.begin() as conn, _driver(conn).cursor() as cursor:
            for row in _steps(path):
                cursor.execute(INSERT_SQL, row)


def executemany(engine: Engine, paths: list[Path]) -> None:
    for path in paths:
        with engine.begin() as conn, _driver(conn).cursor() as cursor:
            cursor.executemany(INSERT_SQL, _steps(path))


def step_rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(result_steps)).scalar_one())


def empty(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE result_steps, result_runs"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE result_steps"))


def timed(engine: Engine, method: Callable[[Engine, list[Path]], None], paths: list[Path],
          expected_rows: int, fresh: bool = True) -> float:
    if fresh:
        empty(engine)
    started = time.perf_counter()
    method(engine, paths)
    elapsed = time.perf_counter() - started
    loaded = step_rows(engine)
    if loaded != expected_rows:
        raise RuntimeError(f"{method.__name__} left {loaded} step rows, not {expected_rows}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=64)
    parser.add_argument("--rows", type=int, default=20_000, help="step rows per snapshot")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--insert-snapshots", type=int, default=8,
                        help="snapshots the INSERT baselines load (scaled to all)")
    args = parser.parse_args()
    expected = args.snapshots * args.rows
    args.insert_snapshots = min(args.insert_snapshots, args.snapshots)
    scale = args.snapshots / args.insert_snapshots
    with bench_database() as url, tempfile.TemporaryDirectory() as directory:
        engine = create_db_engine(url)
        upgrade(engine)
        with engine.begin() as conn:
            conn.execute(insert(runs).values(
                id=RUN_ID, status="running", backend="process", request={}, plan={},
                max_parallel=1, cancel_requested=False, created_at=datetime.now(UTC)))
        paths = write_snapshots(Path(directory), args.snapshots, args.rows)
        size_mb = sum(p.stat().st_size for p in paths) / 2**20
        times: dict[str, list[float]] = {k: [] for k in ("simple", "copy", "binary", "insert",
                                                         "many", "repeat")}
        subset, subset_rows = paths[:args.insert_snapshots], args.insert_snapshots * args.rows
        for number in range(args.rounds):
            methods = [("simple", simple_load, paths, expected, 1.0),
                       ("copy", minimal_copy, paths, expected, 1.0),
                       ("binary", minimal_binary_copy, paths, expected, 1.0),
                       ("insert", row_by_row, subset, subset_rows, scale),
                       ("many", executemany, subset, subset_rows, scale)]
            random.Random(number).shuffle(methods)
            for name, method, files, rows, factor in methods:
                times[name].append(timed(engine, method, files, rows) * factor)
            simple_load(engine, paths)  # then load again over the rows just loaded
            times["repeat"].append(timed(engine, simple_load, paths, expected, fresh=False))
        with engine.connect() as conn:
            runs_loaded = conn.execute(select(func.count()).select_from(result_runs)).scalar()
        engine.dispose()
        report(args, url, size_mb, times, int(runs_loaded or 0))
    simple, copy, binary, insert_ = (statistics.median(times[k])
                                     for k in ("simple", "copy", "binary", "insert"))
    return 0 if simple <= 1.5 * min(copy, binary) and insert_ >= 10 * simple else 1


def report(args: argparse.Namespace, url: str, size_mb: float, times: dict[str, list[float]],
           runs_loaded: int) -> None:
    rows = args.snapshots * args.rows
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nAggregation: {args.snapshots} snapshots x {args.rows:,} step rows ({rows:,} rows, "
          f"{size_mb:.0f} MiB of SQLite), one transaction per snapshot, median of "
          f"{args.rounds} rounds; PostgreSQL at {url.rpartition('@')[2]}, {os.cpu_count()} CPUs")
    print(f"{'':44}{'seconds':>9}{'rows/s':>12}   per round")
    scaled = f" *{args.insert_snapshots}"
    labels = {"simple": "SIMPLE (validate + replace + binary COPY)",
              "copy": "minimal script (COPY, text)", "binary": "minimal script (COPY, binary)",
              "insert": "row-by-row INSERT" + scaled, "many": "executemany INSERT" + scaled,
              "repeat": "SIMPLE again over loaded rows"}
    for key, label in labels.items():
        print(f"{label:44}{medians[key]:>9.2f}{rows / medians[key]:>12,.0f}   "
              + ", ".join(f"{t:.2f}" for t in times[key]))
    # Against the faster of the two minimal scripts, whichever it was.
    over_copy = medians["simple"] / min(medians["copy"], medians["binary"])
    under_insert = medians["insert"] / medians["simple"]
    print(f"{'SIMPLE / fastest minimal COPY':44}{over_copy:>9.2f}x   target <= 1.5x   "
          f"{'ok' if over_copy <= 1.5 else 'MISSED'}")
    print(f"{'row-by-row INSERT / SIMPLE':44}{under_insert:>9.1f}x   target >= 10x    "
          f"{'ok' if under_insert >= 10 else 'MISSED'}")
    print(f"{'executemany INSERT / SIMPLE':44}{medians['many'] / medians['simple']:>9.1f}x   "
          "(for reference)")
    print(f"*{args.insert_snapshots}: measured on {args.insert_snapshots} of {args.snapshots} "
          f"snapshots, scaled to {args.snapshots}. Idempotent: {runs_loaded} run rows and "
          f"{rows:,} step rows after loading every snapshot twice")


if __name__ == "__main__":
    sys.exit(main())
