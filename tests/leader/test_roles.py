# ruff: noqa: F811 - the fixtures imported from tests.services are parameters here
"""Roles: a split role needs PostgreSQL; a reconciler serves health and metrics only and
acts only while it leads; an API replica serves the API and never starts the backend."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert

from controller.api.app import create_app
from controller.db.schema import leases
from controller.service import Controller
from controller.settings import Settings
from tests.services import pg_server, pg_server_url  # noqa: F401 - fixtures


@pytest.mark.parametrize("role", ["api", "reconciler"])
def test_a_split_role_on_sqlite_is_one_line_and_exit_2(tmp_path: Path, role: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    env["SIMPLE_DATA_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-m", "controller.cli", "serve", "--role", role,
                           "--port", "0"], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--role {role} needs PostgreSQL" in lines[0], done.stderr
    assert not (tmp_path / "simple.db").exists(), "nothing was created or migrated"


def role_settings(settings: Settings, url: str, role: str) -> Settings:
    return settings.model_copy(update={
        "database_url": url, "role": role, "lease_duration_s": 3.0,
        "lease_renew_deadline_s": 2.0, "lease_retry_s": 0.2, "holder_id": f"test-{role}"})


@pytest.fixture
def pg_settings(settings: Settings, pg_server_url: str) -> Iterator[tuple[Settings, str]]:
    yield settings, pg_server_url


@pytest.mark.postgres
def test_the_reconciler_role_serves_health_and_metrics_only_and_leads(
    pg_settings: tuple[Settings, str],
) -> None:
    settings, url = pg_settings
    controller = Controller(role_settings(settings, url, "reconciler"))
    with TestClient(create_app(controller), base_url="http://localhost") as http:
        assert http.get("/healthz").status_code == 200
        assert http.get("/metrics").status_code == 200
        for path in ("/v1/runs", "/v1/templates", "/"):
            assert http.get(path).status_code == 404, path
        deadline = time.monotonic() + 10
        while not controller.leadership.leading() and time.monotonic() < deadline:
            time.sleep(0.05)
        ready = http.get("/readyz").json()
        assert ready["leader"] == {"holder": "test-reconciler", "epoch": 1, "leading": True,
                                   "role": "reconciler"}
        assert "simple_leader 1.0" in http.get("/metrics").text


@pytest.mark.postgres
def test_an_api_replica_takes_runs_and_never_starts_the_backend(
    pg_settings: tuple[Settings, str],
) -> None:
    settings, url = pg_settings
    controller = Controller(role_settings(settings, url, "api"))
    started: list[str] = []
    controller.backend.start = lambda: started.append("start")  # type: ignore[method-assign]
    controller.backend.launch = lambda spec: started.append("launch")  # type: ignore[method-assign]
    with TestClient(create_app(controller), base_url="http://localhost") as http:
        assert controller.reconciler is None
        made = http.post("/v1/runs", json={"names": ["quick"]})
        assert made.status_code == 201, made.text
        run = http.get(f"/v1/runs/{made.json()['run_id']}").json()
        assert run["status"] == "pending"  # no reconciler here: it waits for the leader
        ready = http.get("/readyz").json()
        assert ready["leader"] == {"holder": None, "epoch": None, "leading": False,
                                   "role": "api"}
        now = datetime.now(UTC)
        with controller.engine.begin() as conn:
            conn.execute(insert(leases).values(name="simple-reconciler", holder="rec-1",
                                               epoch=3, renewed_at=now, acquired_at=now))
        assert http.get("/readyz").json()["leader"]["holder"] == "rec-1"
        assert "Reconciler leader: <code>rec-1</code> (epoch 3)" in http.get("/").text
    assert started == []
