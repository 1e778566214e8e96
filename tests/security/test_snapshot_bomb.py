"""Finding 1: a small snapshot must not freeze the controller.

The review's bomb is a `runs` table with a VIRTUAL generated column that builds a
200 MB string per row: SQLite's integrity check computes it. Any file must be
accepted or refused in at most 2 s of CPU and 64 MB, and reading it must never
hold up launches, timeouts or cancels of other sandboxes.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from controller.errors import SnapshotRejected
from controller.intake.aggregator import read_snapshot
from controller.intake.snapshot_guard import open_under_budget
from sandbox_image.contract import SNAPSHOT_SCHEMA_SQL
from tests.ci.conftest import Served
from tests.e2e_helpers import wait_for
from tests.security.hostile import BOMB_EXPRESSION, generated_column_bomb, write_snapshot

LIMIT = 64 * 1024 * 1024
CPU_BUDGET_S = 2.0


def sandbox_of(served: Served, run_id: str) -> dict[str, object]:
    with served.client() as http:
        return dict(http.get(f"/v1/runs/{run_id}").json()["sandboxes"][0])


@pytest.mark.slow
@pytest.mark.once
def test_a_bomb_does_not_hold_up_another_run(served: Served, tmp_path: Path) -> None:
    generated_column_bomb(tmp_path / "upload_script.input", rows=60)
    with served.client() as http:
        bomb_run = http.post("/v1/runs", json={"templates": ["upload_file"]}).json()["run_id"]
        bomb = sandbox_of(served, bomb_run)["sandbox_id"]

        def uploaded() -> bool:
            response = http.get(f"/v1/sandboxes/{bomb}/logs")
            return response.status_code == 200 and "UPLOADED 201" in response.text

        wait_for(uploaded, timeout_s=60, what="the bomb's upload")
        # The bomb's sandbox has exited: its snapshot is read now. Another run starts
        # meanwhile and must end in its usual time (about a second, here at most 25 s).
        started = time.monotonic()
        other = http.post("/v1/runs", json={"templates": ["ci_ok"]}).json()["run_id"]
        assert served.wait_run(other, timeout_s=25)["status"] == "succeeded"
        assert time.monotonic() - started < 25
    finished = served.wait_run(bomb_run, timeout_s=60)
    error = str(sandbox_of(served, bomb_run)["error"])
    assert "snapshot rejected" in error and "generated column" in error, finished


BOMBS = {
    "generated column in runs": (
        SNAPSHOT_SCHEMA_SQL.replace(
            "mechanisms_used TEXT);",
            f"mechanisms_used TEXT, x TEXT GENERATED ALWAYS AS ({BOMB_EXPRESSION}) VIRTUAL);",
        ),
        "",
        "generated column",
    ),
    "generated column elsewhere": (
        SNAPSHOT_SCHEMA_SQL,
        f"CREATE TABLE other (run_id TEXT, x TEXT GENERATED ALWAYS AS ({BOMB_EXPRESSION}));"
        "INSERT INTO other (run_id) VALUES ('a'), ('b'), ('c');",
        "generated column",
    ),
    "check constraint in runs": (
        SNAPSHOT_SCHEMA_SQL.replace(
            "mechanisms_used TEXT);",
            f"mechanisms_used TEXT CHECK (length({BOMB_EXPRESSION}) > 0));",
        ),
        "",
        "CHECK constraint",
    ),
    "expression index": (
        SNAPSHOT_SCHEMA_SQL,
        f"CREATE TABLE other (run_id TEXT); INSERT INTO other VALUES ('a'), ('b');"
        f"CREATE INDEX costly ON other (length({BOMB_EXPRESSION}));",
        "expression index",
    ),
    "index on a contract table": (
        SNAPSHOT_SCHEMA_SQL,
        "CREATE INDEX by_cost ON steps (cost_usd);",
        "index `by_cost`",
    ),
    "view": (SNAPSHOT_SCHEMA_SQL, f"CREATE VIEW v AS SELECT {BOMB_EXPRESSION} FROM runs;", "view"),
    "trigger": (
        SNAPSHOT_SCHEMA_SQL,
        "CREATE TRIGGER t AFTER INSERT ON runs BEGIN SELECT 1; END;",
        "trigger",
    ),
    "virtual table": (SNAPSHOT_SCHEMA_SQL, "CREATE VIRTUAL TABLE v USING fts5(x);", "virtual"),
    "wrong declared type": (
        SNAPSHOT_SCHEMA_SQL.replace("cost_usd REAL, tokens_used", "cost_usd TEXT, tokens_used"),
        "",
        "declared",
    ),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_a_hostile_schema_is_refused_with_its_reason_in_budget(name: str, tmp_path: Path) -> None:
    schema, extra, reason = BOMBS[name]
    data = write_snapshot(tmp_path / "bomb.sqlite", schema, run_rows=3, extra_sql=extra)
    started = time.thread_time()
    with pytest.raises(SnapshotRejected) as caught:
        read_snapshot(data, LIMIT)
    assert time.thread_time() - started < CPU_BUDGET_S
    assert reason in caught.value.message
    assert caught.value.hint  # says what to do


def test_the_cpu_budget_stops_a_costly_read(tmp_path: Path) -> None:
    """SQLite's progress handler aborts a read that passes its CPU budget."""
    data = write_snapshot(tmp_path / "many.sqlite", run_rows=5000)
    read_snapshot(data, LIMIT)  # within the default budget
    with pytest.raises(SnapshotRejected, match="CPU budget"):
        read_snapshot(data, LIMIT, cpu_s=0.0)


MEMORY_PROBE = textwrap.dedent(
    """
    import sys
    from controller.intake.aggregator import read_snapshot
    from controller.errors import SnapshotRejected

    def hwm_kib():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

    data = open(sys.argv[1], "rb").read()
    before = hwm_kib()
    try:
        read_snapshot(data, 64 * 1024 * 1024)
        outcome = "accepted"
    except SnapshotRejected as e:
        outcome = e.message
    print(hwm_kib() - before)
    print(outcome)
    """
)


def test_a_bomb_costs_less_than_64_mb(tmp_path: Path) -> None:
    path = tmp_path / "bomb.sqlite"
    generated_column_bomb(path, rows=3)
    probe = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    grown_kib, outcome = probe.stdout.splitlines()[:2]
    assert int(grown_kib) < 64 * 1024, f"reading grew the peak by {grown_kib} KiB ({outcome})"
    assert "generated column" in outcome


def test_our_own_runtime_snapshot_is_accepted(tmp_path: Path) -> None:
    """The allowlist keeps what the built-in runtime writes (its `world` table has a CHECK)."""
    from sandbox_image.snapshot import WORLD_SCHEMA_SQL

    data = write_snapshot(tmp_path / "own.sqlite", SNAPSHOT_SCHEMA_SQL + WORLD_SCHEMA_SQL)
    rows = read_snapshot(data, LIMIT)
    assert [r["run_id"] for r in rows.runs] == ["r0"]



def test_sqlite_limits_stop_a_value_before_it_is_built(tmp_path: Path) -> None:
    """Whatever a schema evaluates, no value can grow past the reader's length limit."""
    import sqlite3

    from controller.intake.snapshot_guard import MAX_VALUE_BYTES, open_under_budget

    path = tmp_path / "plain.sqlite"
    write_snapshot(path)
    with open_under_budget(str(path)) as conn:
        # SQLite stops building the 20 MB string at the limit (the result is NULL).
        assert conn.execute("SELECT printf('%.*c', 2e7, 'x')").fetchall() == [(None,)]
        with pytest.raises(sqlite3.DataError, match="too big"):
            conn.execute("SELECT zeroblob(?)", (MAX_VALUE_BYTES + 1,)).fetchall()


def test_ending_an_attempt_never_runs_on_the_reconciler_pass(
    monkeypatch: pytest.MonkeyPatch, settings: object
) -> None:
    """However long a snapshot takes, the pass that noticed the exit goes on at once."""
    import threading
    from types import SimpleNamespace

    from controller.attempts.finisher import Finisher, Outcome
    from controller.service import Controller
    from controller.states import SandboxStatus

    release, calls = threading.Event(), []

    def slow_finish(*args: object, **kwargs: object) -> None:
        calls.append(args)
        release.wait(30)

    monkeypatch.setattr(Finisher, "finish", slow_finish)
    controller = Controller(settings)  # type: ignore[arg-type]
    try:
        row = SimpleNamespace(id="sb-1", attempt=1)
        started = time.monotonic()
        controller.reconciler._finish(row, Outcome(SandboxStatus.SUCCEEDED, 0, None))
        controller.reconciler._finish(row, Outcome(SandboxStatus.SUCCEEDED, 0, None))
        assert time.monotonic() - started < 1.0
        wait_for(lambda: calls, timeout_s=10, what="the finisher")
        assert len(calls) == 1  # the attempt is ended once, not once per pass
    finally:
        release.set()
        controller.close()


def test_the_guards_own_connection_refuses_schema_objects_calling_unsafe_functions(
    tmp_path: Path,
) -> None:
    """Issue 25, finding 13: `PRAGMA trusted_schema=OFF` is a defence in depth behind the
    schema allowlist, which rejects every hostile snapshot first, so no test noticed it
    gone. Here the allowlist is out of the way: the file is opened through the guard's
    own connection and a view that calls a function with side effects is read."""
    path = tmp_path / "unsafe.sqlite"
    with sqlite3.connect(path) as writer:
        writer.execute("CREATE TABLE t (x INTEGER)")
        writer.execute("INSERT INTO t VALUES (1)")
        writer.execute("CREATE VIEW v AS SELECT side_effect(x) AS y FROM t")
    writer.close()
    calls: list[int] = []

    def side_effect(value: int) -> int:  # not SQLITE_INNOCUOUS, as Python registers it
        calls.append(value)
        return value

    with open_under_budget(str(path)) as conn:
        conn.create_function("side_effect", 1, side_effect)
        assert conn.execute("SELECT side_effect(2)").fetchone() == (2,)  # direct: allowed
        with pytest.raises(sqlite3.OperationalError, match="unsafe use of side_effect"):
            conn.execute("SELECT y FROM v").fetchall()
    assert calls == [2], "the schema's view never ran the function"
