"""Resume from checkpoint end to end on the process backend with the local store.

20 steps that fail transiently at step 12 on attempt 1: attempt 2 restores the
checkpoint attempt 1 left (steps 1..11), says so in its `started` event and on the
attempt, and the aggregated result holds steps 1..20 once, the restored ones exactly
as attempt 1 made them, with no step's cost counted twice. A truncated or tampered
checkpoint makes attempt 2 start over, with the reason on the sandbox.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select

from controller.cli.embedded import EmbeddedServer
from controller.db.schema import events, result_runs, result_steps
from controller.settings import Settings
from tests.e2e_helpers import report, start_run, wait_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RESUMABLE = {"agents": 2, "steps": 20, "llm_latency_ms": 2, "fail_at_step": 12,
             "fail_attempts": 1, "checkpoint_every_steps": 5, "checkpoint_interval_s": 0}


def resume_catalog(write: Callable[..., Path], command: list[str] | None = None) -> Path:
    template = {
        "id": "resumable", "category": "test", "estimate": {"cost_usd": [0.1, 0.5],
                                                            "runtime_s": [1, 2]},
        "timeout_s": 120, "config": RESUMABLE, **({"command": command} if command else {}),
    }
    return write(json.dumps({"templates": [template]}))


def finished(settings: Settings, catalog: Path) -> dict[str, Any]:
    """Run `resumable` to its end; the run, the sandbox, the report and the DB's rows."""
    with EmbeddedServer(settings.model_copy(update={"catalog_dirs": [catalog]})) as server:
        run_id = start_run(server.url, {"templates": ["resumable"]})
        run = wait_run(server.url, run_id, 120)
        sandbox_id = run["sandboxes"][0]["sandbox_id"]
        sandbox = httpx.get(f"{server.url}/v1/sandboxes/{sandbox_id}", timeout=30).json()
        result = report(server.url, run_id)
    engine = create_engine(settings.resolved_database_url)
    with engine.connect() as conn:
        steps = conn.execute(select(result_steps).where(result_steps.c.sandbox_id == sandbox_id)
                             .order_by(result_steps.c.step)).all()
        run_row = conn.execute(select(result_runs)
                               .where(result_runs.c.sandbox_id == sandbox_id)).one()
        started = [e.data for e in conn.execute(select(events).where(
            events.c.sandbox_id == sandbox_id, events.c.type == "started")
            .order_by(events.c.attempt))]
    engine.dispose()
    return {"run": run, "sandbox": sandbox, "report": result, "steps": steps,
            "run_row": run_row, "started": started, "run_id": run_id,
            "sandbox_id": sandbox_id}


def checkpoint_steps(settings: Settings, run_id: str, sandbox_id: str) -> list[tuple[Any, ...]]:
    """Attempt 1's checkpoint's step rows, read from the local store."""
    path = (settings.data_dir / "store" / "snapshots" / run_id / sandbox_id
            / "attempt-1.sqlite")
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT step, duration_ms, actions, failures, cost_usd, tokens "
                            "FROM steps ORDER BY step").fetchall()
    finally:
        conn.close()


def test_a_retry_resumes_after_the_last_checkpoint(
    settings: Settings, catalog_dir: Callable[..., Path]
) -> None:
    got = finished(settings, resume_catalog(catalog_dir))
    sandbox = got["sandbox"]
    assert sandbox["status"] == "succeeded" and sandbox["attempts"] == 2, sandbox
    history = sandbox["attempt_history"]
    assert [a["resumed_from_step"] for a in history] == [None, 11]
    assert history[1]["resume_note"] is None and sandbox["resume_note"] is None
    assert [s["resumed_from_step"] for s in got["started"]] == [None, 11]
    assert [s.step for s in got["steps"]] == list(range(1, 21)), "each step exactly once"
    restored = checkpoint_steps(settings, got["run_id"], got["sandbox_id"])
    assert [r[0] for r in restored] == list(range(1, 12))
    loaded = [(s.duration_ms, s.actions, s.failures, s.cost_usd, s.tokens)
              for s in got["steps"][:11]]
    assert loaded == [r[1:] for r in restored], (
        "steps 1..11 are attempt 1's rows, not run again")
    step_cost = round(sum(s.cost_usd for s in got["steps"]), 6)
    assert got["run_row"].cost_usd == pytest.approx(step_cost)
    row = got["report"]["sandboxes"][0]
    assert row["steps_recorded"] == 20
    assert got["report"]["totals"]["cost_usd"] == pytest.approx(step_cost)
    assert sandbox["cost_usd"] == pytest.approx(step_cost, rel=1e-4), (
        "the sandbox's live cost counts the restored steps once")


@pytest.mark.once  # the resume path itself runs on PostgreSQL too (above)
@pytest.mark.parametrize(("mode", "reason"), [
    ("truncate", "checkpoint of attempt 1 rejected"),
    ("gap", "steps are not exactly 1..k"),
])
def test_a_damaged_checkpoint_means_starting_over(
    settings: Settings, catalog_dir: Callable[..., Path], mode: str, reason: str
) -> None:
    command = [sys.executable, str(FIXTURES / "tamper_checkpoint.py"), mode]
    got = finished(settings, resume_catalog(catalog_dir, command))
    sandbox = got["sandbox"]
    assert sandbox["status"] == "succeeded" and sandbox["attempts"] == 2, sandbox
    assert [a["resumed_from_step"] for a in sandbox["attempt_history"]] == [None, None]
    assert sandbox["resume_note"].startswith("starting over: ")
    assert reason in sandbox["resume_note"]
    assert sandbox["attempt_history"][1]["resume_note"] == sandbox["resume_note"]
    assert [s["resumed_from_step"] for s in got["started"]] == [None, None]
    assert [s.step for s in got["steps"]] == list(range(1, 21)), "each step exactly once"
    step_cost = round(sum(s.cost_usd for s in got["steps"]), 6)
    assert got["report"]["totals"]["cost_usd"] == pytest.approx(step_cost)
