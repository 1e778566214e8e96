"""Staged runs end to end on the process backend with the built-in runtime: the seed's
"8-1" (the judge starts after all 8 explorers ended, reads their 8 runs from
SIMPLE_INPUT_URL and keeps what it read in its own snapshot), a failed quorum that
skips the judge with the reason, and the "1-8" and "8-1-8-1" examples."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from controller.cli.embedded import EmbeddedServer
from controller.settings import REPO_CATALOG_DIR, Settings
from controller.store.base import snapshot_key, stage_input_key
from controller.store.local import LocalStore
from tests.e2e_helpers import report, start_run, wait_run

pytestmark = pytest.mark.once  # the database engine plays no part beyond test_ledger's

EXAMPLES = REPO_CATALOG_DIR / "examples"


def _rows(data: bytes, tmp_path: Path, sql: str) -> list[tuple[Any, ...]]:
    path = tmp_path / f"copy-{len(list(tmp_path.iterdir()))}.sqlite"
    path.write_bytes(data)
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def test_eight_explorers_then_a_judge_that_reads_their_runs(
    settings: Settings, tmp_path: Path
) -> None:
    served = settings.model_copy(update={"catalog_dirs": [EXAMPLES]})
    with EmbeddedServer(served) as server:
        plan = httpx.post(f"{server.url}/v1/plans", json={"names": ["swarm-8-1"]}, timeout=30)
        run_id = start_run(server.url, {"names": ["swarm-8-1"]})
        run = wait_run(server.url, run_id, 180)
        result = report(server.url, run_id)
    assert plan.json()["critical_path"][-1] == "judge"
    assert run["status"] == "succeeded", run
    explorers = [s for s in run["sandboxes"] if s["template_id"].startswith("explorer_")]
    judge = next(s for s in run["sandboxes"] if s["template_id"] == "judge")
    assert len(explorers) == 8 and all(s["stage"] == 0 for s in explorers)
    assert judge["stage"] == 1
    last_explorer_end = max(_at(s["finished_at"]) for s in explorers)
    assert _at(judge["launched_at"]) >= last_explorer_end, "the judge waited for all 8"
    assert {r["sandbox_id"]: r["stage"] for r in result["sandboxes"]}[judge["sandbox_id"]] == 1
    store = LocalStore.from_url(served.resolved_store_url)
    given = store.get(stage_input_key(run_id, 1))
    assert given is not None
    assert len(_rows(given, tmp_path, "SELECT * FROM runs")) == 8
    snapshot = store.get(snapshot_key(run_id, judge["sandbox_id"], judge["attempts"]))
    assert snapshot is not None
    read = _rows(snapshot, tmp_path, "SELECT sandbox_id, cost_usd FROM input_runs")
    assert sorted(r[0] for r in read) == sorted(s["sandbox_id"] for s in explorers)
    costs = {r["sandbox_id"]: r["cost_usd"] for r in result["sandboxes"]}
    assert all(cost == pytest.approx(costs[sid]) for sid, cost in read), "what it read is theirs"
    verdict = _rows(snapshot, tmp_path, "SELECT runs_read, sandboxes_read FROM verdict")
    assert verdict == [(8, 8)]


def test_a_failed_quorum_skips_the_judge_with_the_reason(
    settings: Settings, catalog_dir: Callable[[str], Path]
) -> None:
    templates = [
        {
            "id": f"probe_{k}",
            "category": "quorum",
            "estimate": {"cost_usd": [0.01, 0.2], "runtime_s": [1, 5]},
            "config": {
                "agents": 2,
                "steps": 1,
                "llm_latency_ms": 1,
                **({"fail_at_step": 1} if k <= 3 else {}),
            },
        }
        for k in range(1, 9)
    ]
    templates.append({**templates[-1], "id": "verdict", "config": {"gather": True}})
    catalog = catalog_dir(yaml.safe_dump({"templates": templates}))
    stages = [
        {"templates": [f"probe_{k}" for k in range(1, 9)], "policy": {"quorum": 6}},
        {"templates": ["verdict"], "policy": "all"},
    ]
    served = settings.model_copy(update={"catalog_dirs": [catalog], "max_attempts": 1})
    with EmbeddedServer(served) as server:
        run = wait_run(server.url, start_run(server.url, {"stages": stages}), 120)
    judge = next(s for s in run["sandboxes"] if s["template_id"] == "verdict")
    assert judge["status"] == "skipped"
    assert judge["error"] == (
        "skipped: stage 0 did not meet its policy (quorum 6): 5 of 8 sandboxes succeeded"
    )
    assert judge["attempts"] == 0, "never launched"
    assert run["status"] == "failed"
    assert sum(s["status"] == "failed" for s in run["sandboxes"]) == 3


def test_broadcast_and_two_rounds_run_too(settings: Settings, tmp_path: Path) -> None:
    served = settings.model_copy(update={"catalog_dirs": [EXAMPLES]})
    with EmbeddedServer(served) as server:
        one_eight = start_run(server.url, {"names": ["swarm-1-8"]})
        rounds = start_run(server.url, {"names": ["swarm-8-1-8-1"], "max_parallel": 8})
        first = wait_run(server.url, one_eight, 240)
        second = wait_run(server.url, rounds, 300)
    assert first["status"] == "succeeded", first
    assert second["status"] == "succeeded", second
    store = LocalStore.from_url(served.resolved_store_url)
    for run, stages in ((first, 2), (second, 4)):
        by_stage: dict[int, list[dict[str, Any]]] = {}
        for s in run["sandboxes"]:
            by_stage.setdefault(s["stage"], []).append(s)
        assert sorted(by_stage) == list(range(stages))
        for stage in range(1, stages):
            started = min(_at(s["launched_at"]) for s in by_stage[stage])
            assert started >= max(_at(s["finished_at"]) for s in by_stage[stage - 1])
            member = by_stage[stage][0]
            snapshot = store.get(snapshot_key(run["run_id"], member["sandbox_id"], 1))
            assert snapshot is not None
            read = _rows(snapshot, tmp_path, "SELECT sandbox_id FROM input_runs")
            assert sorted(r[0] for r in read) == sorted(
                s["sandbox_id"] for s in by_stage[stage - 1]
            ), f"stage {stage} read stage {stage - 1}"
