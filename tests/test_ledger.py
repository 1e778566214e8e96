"""The ledger end to end on the process backend: one entry per ended attempt, chained;
`simplectl verify` passes on a finished run and names the entry when a cost in the
database is changed, a ledger row is deleted, or a snapshot object is replaced; appends
from many threads at once never fork the chain (SQLite and PostgreSQL)."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, delete, insert, select, update
from typer.testing import CliRunner

from controller.cli.embedded import EmbeddedServer
from controller.cli.main import app
from controller.db.engine import create_db_engine, upgrade
from controller.db.schema import attempts, ledger, result_runs, result_steps, runs, sandboxes
from controller.results.ledger import GENESIS, append_entry, attempt_record, entry_hash
from controller.results.verify import verify_run
from controller.settings import Settings
from controller.store.base import snapshot_key
from controller.store.local import LocalStore
from tests.e2e_helpers import report, start_run, wait_run

CATALOG = """
templates:
  - id: steady
    category: test
    estimate: {cost_usd: [0.01, 0.5], runtime_s: [1, 5]}
    config: {agents: 2, steps: 2, llm_latency_ms: 5}
  - id: flaky
    category: test
    estimate: {cost_usd: [0.01, 0.5], runtime_s: [1, 5]}
    config: {agents: 2, steps: 2, llm_latency_ms: 5, fail_attempts: 1}
"""


@pytest.fixture
def finished(settings: Settings, catalog_dir: Callable[[str], Path]) -> Iterator[dict[str, Any]]:
    """A finished run of two templates, one retried once: three ended attempts."""
    served = settings.model_copy(update={"catalog_dirs": [catalog_dir(CATALOG)]})
    with EmbeddedServer(served) as server:
        run_id = start_run(server.url, {"templates": ["steady", "flaky"]})
        run = wait_run(server.url, run_id, 90)
        chain = httpx.get(f"{server.url}/v1/runs/{run_id}/ledger", timeout=30).json()
        result = report(server.url, run_id)
        junit = httpx.get(f"{server.url}/v1/runs/{run_id}/report?format=junit", timeout=30).text
        markdown = httpx.get(
            f"{server.url}/v1/runs/{run_id}/report?format=markdown", timeout=30
        ).text
    engine = create_db_engine(settings.resolved_database_url)
    yield {
        "run": run,
        "ledger": chain,
        "report": result,
        "junit": junit,
        "markdown": markdown,
        "engine": engine,
        "store": LocalStore.from_url(settings.resolved_store_url),
        "settings": settings,
    }
    engine.dispose()


def _verify(f: dict[str, Any]) -> Any:
    return verify_run(f["engine"], f["store"], f["run"]["run_id"], 64 * 1024 * 1024)


def _cli_verify(f: dict[str, Any]) -> Any:
    env = {
        "SIMPLE_DATA_DIR": str(f["settings"].data_dir),
        "SIMPLE_DATABASE_URL": f["settings"].resolved_database_url,
    }
    return CliRunner().invoke(app, ["verify", f["run"]["run_id"]], env=env)


def test_ledger_chains_every_attempt_and_verify_names_each_tampering(
    finished: dict[str, Any],
) -> None:
    """One run, tampered with and restored in turn (a run per case would cost minutes)."""
    _check_chain_and_report(finished)
    result = _cli_verify(finished)
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    assert "ledger verified: 3 entries, 3 snapshots re-hashed" in lines[0]
    _check_changed_costs(finished)
    for which in (1, 0, -1):
        _check_deleted_row(finished, which)
    _check_replaced_snapshot(finished)
    _check_edited_statuses(finished)
    _check_edited_steps(finished)
    assert _cli_verify(finished).exit_code == 0, "restored: it verifies again"


def _check_chain_and_report(finished: dict[str, Any]) -> None:
    assert finished["run"]["status"] == "succeeded"
    entries = finished["ledger"]["entries"]
    assert [e["seq"] for e in entries] == [1, 2, 3], "steady 1, flaky 1 (failed) and 2"
    assert entries[0]["prev_hash"] == GENESIS
    for before, entry in itertools.pairwise(entries):
        assert entry["prev_hash"] == before["entry_hash"]
    for entry in entries:
        assert entry["entry_hash"] == entry_hash(entry["seq"], entry["prev_hash"], entry["record"])
    flaky = [e["record"] for e in entries if e["record"]["template_id"] == "flaky"]
    assert [(r["attempt"], r["status"]) for r in flaky] == [(1, "failed"), (2, "succeeded")]
    assert all(len(r["snapshot_sha256"]) == 64 and r["snapshot_bytes"] > 0 for r in flaky)
    head = entries[-1]["entry_hash"]
    assert finished["ledger"]["ledger_head"] == head
    assert finished["report"]["ledger_head"] == head
    assert f'<property name="ledger_head" value="{head}"' in finished["junit"]
    assert f"Ledger head: `{head}`" in finished["markdown"]


def _check_changed_costs(finished: dict[str, Any]) -> None:
    engine: Engine = finished["engine"]
    entries = finished["ledger"]["entries"]
    steady = next(e for e in entries if e["record"]["template_id"] == "steady")
    name = f"entry {steady['seq']} (sandbox {steady['sandbox_id']}, attempt 1)"
    where = result_runs.c.sandbox_id == steady["sandbox_id"]
    with engine.begin() as conn:
        conn.execute(update(result_runs).where(where).values(cost_usd=99.0))
    result = _cli_verify(finished)
    assert result.exit_code == 1
    assert name in result.stdout
    assert "aggregated result rows cost $99.000000" in result.stdout
    with engine.begin() as conn:  # both changed to agree: the chain still catches it
        conn.execute(
            update(attempts).where(attempts.c.sandbox_id == steady["sandbox_id"])
            .values(cost_usd=99.0)
        )
    verdict = _verify(finished)
    assert not verdict.ok
    assert verdict.problem == (
        f"{name}: cost_usd is 99.0 in the database, the ledger recorded "
        f"{steady['record']['cost_usd']!r}"
    )
    with engine.begin() as conn:
        conn.execute(
            update(result_runs).where(where).values(cost_usd=steady["record"]["cost_usd"])
        )
        conn.execute(
            update(attempts).where(attempts.c.sandbox_id == steady["sandbox_id"])
            .values(cost_usd=steady["record"]["cost_usd"])
        )
    assert _verify(finished).ok


def _check_deleted_row(finished: dict[str, Any], which: int) -> None:
    gone = finished["ledger"]["entries"][which]
    where = (ledger.c.run_id == finished["run"]["run_id"]) & (ledger.c.seq == gone["seq"])
    with finished["engine"].begin() as conn:
        row = conn.execute(select(ledger).where(where)).one()
        conn.execute(delete(ledger).where(where))
    result = _cli_verify(finished)
    assert result.exit_code == 1
    assert f"entry {gone['seq']} is missing" in result.stdout
    assert "a ledger row was deleted" in result.stdout
    with finished["engine"].begin() as conn:
        conn.execute(insert(ledger).values(**row._asdict()))


def _check_replaced_snapshot(finished: dict[str, Any]) -> None:
    entry = finished["ledger"]["entries"][1]
    key = snapshot_key(finished["run"]["run_id"], entry["sandbox_id"], entry["attempt"])
    store: LocalStore = finished["store"]
    original = store.get(key)
    assert original is not None
    store.put(key, original + b"\0")
    verdict = _verify(finished)
    assert not verdict.ok
    assert verdict.problem is not None
    assert verdict.problem.startswith(f"entry {entry['seq']} (sandbox {entry['sandbox_id']}")
    assert f"snapshot object {key} was replaced" in verdict.problem
    store.put(key, original)


def test_concurrent_appends_never_fork_the_chain(database_url: str) -> None:
    engine = create_db_engine(database_url)
    upgrade(engine)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(
            insert(runs).values(
                id="run-cafe", status="running", backend="process", request={}, plan={},
                max_parallel=1, cancel_requested=False, created_at=now,
            )
        )
    writers = 12
    barrier = threading.Barrier(writers)
    failures: list[BaseException] = []

    def end_one(index: int) -> None:
        record = attempt_record(
            sandbox_id=f"cafe-s{index}", template_id="t", attempt=1, status="succeeded",
            exit_code=0, cost_usd=0.1 * index, tokens=index, snapshot_sha256=None,
            snapshot_bytes=None,
        )
        barrier.wait()
        try:
            with engine.begin() as conn:
                append_entry(conn, "run-cafe", record, now)
        except BaseException as e:  # collected and asserted below
            failures.append(e)

    threads = [threading.Thread(target=end_one, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures, failures
    with engine.connect() as conn:
        rows = conn.execute(
            select(ledger).where(ledger.c.run_id == "run-cafe").order_by(ledger.c.seq)
        ).all()
    engine.dispose()
    assert [r.seq for r in rows] == list(range(1, writers + 1))
    prev = GENESIS
    for row in rows:
        assert row.prev_hash == prev, "two entries share a predecessor: the chain forked"
        assert row.entry_hash == entry_hash(row.seq, prev, json.loads(json.dumps(row.record)))
        prev = row.entry_hash


def _check_edited_statuses(finished: dict[str, Any]) -> None:
    """Issue 25, finding 7: the statuses the report shows are checked against the ledger."""
    engine: Engine = finished["engine"]
    run_id = finished["run"]["run_id"]
    steady = next(e for e in finished["ledger"]["entries"]
                  if e["record"]["template_id"] == "steady")
    assert steady["record"]["sandbox_status"] == "succeeded"
    assert len(steady["record"]["results_digest"]) == 64
    the_run = runs.c.id == run_id
    the_sandbox = sandboxes.c.id == steady["sandbox_id"]
    for sandbox_status, run_status, named in (
        ("failed", "succeeded", f"sandbox {steady['sandbox_id']} is 'failed' in the database, "
         "the ledger recorded its attempt 1 ending it 'succeeded'"),
        ("succeeded", "failed", "the run is 'failed' in the database, its sandboxes' "
         "statuses make it 'succeeded'"),
        ("failed", "failed", f"sandbox {steady['sandbox_id']} is 'failed'"),  # agreeing edits
    ):
        with engine.begin() as conn:
            conn.execute(update(sandboxes).where(the_sandbox).values(status=sandbox_status))
            conn.execute(update(runs).where(the_run).values(status=run_status))
        result = _cli_verify(finished)
        assert result.exit_code == 1, result.output
        assert named in result.stdout, result.stdout
    with engine.begin() as conn:
        conn.execute(update(sandboxes).where(the_sandbox).values(status="succeeded"))
        conn.execute(update(runs).where(the_run).values(status="succeeded"))
    assert _verify(finished).ok


def _check_edited_steps(finished: dict[str, Any]) -> None:
    """A result step edited (no cost or token total changes): the results digest differs."""
    engine: Engine = finished["engine"]
    steady = next(e for e in finished["ledger"]["entries"]
                  if e["record"]["template_id"] == "steady")
    where = (result_steps.c.sandbox_id == steady["sandbox_id"]) & (result_steps.c.step == 1)
    with engine.begin() as conn:
        before = conn.execute(select(result_steps.c.failures).where(where)).scalar_one()
        conn.execute(update(result_steps).where(where).values(failures=(before or 0) + 7))
    verdict = _verify(finished)
    assert not verdict.ok and verdict.problem is not None
    assert "results_digest is" in verdict.problem, verdict.problem
    with engine.begin() as conn:
        conn.execute(update(result_steps).where(where).values(failures=before))
    assert _verify(finished).ok
