"""The "8-1" staged run on the real Docker engine, default networking: eight explorer
containers, then a judge container that reads their runs through SIMPLE_INPUT_URL (the
controller's signed route, answered on the sandbox-only gateway address) and keeps what
it read in its snapshot; the ledger verifies."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from controller.cli.embedded import EmbeddedServer
from controller.settings import REPO_CATALOG_DIR, Settings
from controller.store.base import snapshot_key
from controller.store.local import LocalStore
from tests.docker_e2e.conftest import RunContainers
from tests.e2e_helpers import start_run, wait_run

pytestmark = [pytest.mark.docker, pytest.mark.once]


def test_eight_explorer_containers_then_a_judge_container(
    docker_settings: Settings, run_containers: RunContainers, tmp_path: Path
) -> None:
    served = docker_settings.model_copy(
        update={
            "catalog_dirs": [REPO_CATALOG_DIR / "examples"],
            "docker_network": None,  # the `simple` network: sandboxes reach the gateway
            "controller_url": None,
        }
    )
    with EmbeddedServer(served) as server:
        run_id = run_containers.track(start_run(server.url, {"names": ["swarm-8-1"]}))
        run = wait_run(server.url, run_id, 300)
        verdict = httpx.get(f"{server.url}/v1/runs/{run_id}/verify", timeout=60).json()
    assert run["status"] == "succeeded", run
    assert verdict["ok"], verdict["summary"]
    explorers = [s for s in run["sandboxes"] if s["stage"] == 0]
    judge = next(s for s in run["sandboxes"] if s["stage"] == 1)
    assert len(explorers) == 8 and judge["template_id"] == "judge"
    assert datetime.fromisoformat(judge["launched_at"]) >= max(
        datetime.fromisoformat(s["finished_at"]) for s in explorers
    )
    data = LocalStore.from_url(served.resolved_store_url).get(
        snapshot_key(run_id, judge["sandbox_id"], judge["attempts"])
    )
    assert data is not None
    copy = tmp_path / "judge.sqlite"
    copy.write_bytes(data)
    conn = sqlite3.connect(copy)
    try:
        read = {r[0] for r in conn.execute("SELECT sandbox_id FROM input_runs")}
    finally:
        conn.close()
    assert read == {s["sandbox_id"] for s in explorers}
    assert run_containers.of_run(run_id) == [], "no container is left behind"
