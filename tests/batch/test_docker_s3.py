"""Batch and resume on the real Docker engine with a real S3 server (rclone).

Sandboxes are containers of simple-sandbox:latest on the host network; their items
and their checkpoint come from presigned S3 GET URLs, their snapshots go to presigned
PUT URLs. One run holds a 100-item batch (98 pass, 1 fails, 1 raises) and a 20-step
template that fails transiently at step 12 on attempt 1 and resumes on attempt 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import httpx
import pytest
from sqlalchemy import create_engine, select

from controller.cli.embedded import EmbeddedServer
from controller.db.schema import result_steps
from controller.settings import Settings
from tests.batch.test_batch_process import hundred_items
from tests.batch.test_resume_process import RESUMABLE
from tests.docker_e2e.conftest import (  # noqa: F401 - fixtures
    RunContainers,
    docker_engine,
    run_containers,
    sandbox_image,
)
from tests.e2e_helpers import report, start_run, wait_run
from tests.services import TEST_BUCKET, S3Server, s3_prefix, s3_server  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.s3, pytest.mark.once]


@pytest.fixture
def docker_settings(settings: Settings, sandbox_image: str, s3_server: S3Server,  # noqa: F811
                    s3_prefix: str) -> Settings:  # noqa: F811
    """Docker backend, host network, S3 store under this test's prefix."""
    return settings.model_copy(update={"backend": "docker", "docker_network": "host",
                                       **s3_server.settings_update(TEST_BUCKET, s3_prefix)})


def catalog(write: Callable[..., Path]) -> Path:
    common = {"category": "test", "estimate": {"cost_usd": [0.0, 0.1], "runtime_s": [1, 2]},
              "timeout_s": 180, "resources": {"cpu": "1", "memory": "256Mi"}}
    directory = write(json.dumps({"templates": [
        {"id": "evals", **common, "items_file": "evals.jsonl", "batch_size": 100},
        {"id": "resumable", **common, "config": RESUMABLE},
    ]}))
    (directory / "evals.jsonl").write_text("".join(json.dumps(i) + "\n" for i in hundred_items()))
    return directory


def test_batch_and_resume_on_docker_with_s3(
    docker_settings: Settings, run_containers: RunContainers,  # noqa: F811
    catalog_dir: Callable[..., Path], s3_server: S3Server, s3_prefix: str,  # noqa: F811
) -> None:
    settings = docker_settings.model_copy(update={"catalog_dirs": [catalog(catalog_dir)]})
    with EmbeddedServer(settings) as server:
        run_id = run_containers.track(start_run(server.url, {"templates": ["evals",
                                                                           "resumable"]}))
        run = wait_run(server.url, run_id, 300)
        by_template = {s["template_id"]: s for s in run["sandboxes"]}
        resumed = httpx.get(f"{server.url}/v1/sandboxes/"
                            f"{by_template['resumable']['sandbox_id']}", timeout=30).json()
        result = report(server.url, run_id)
        junit = httpx.get(f"{server.url}/v1/runs/{run_id}/report?format=junit", timeout=30)
    assert run["status"] == "succeeded", run["sandboxes"]
    rows: dict[str, Any] = {r["template_id"]: r for r in result["sandboxes"]}
    assert rows["evals"]["items"] == {"total": 100, "passed": 98, "failed": 1, "errored": 1}
    assert len(ET.fromstring(junit.text).findall(".//testcase")) == 101
    assert [a["resumed_from_step"] for a in resumed["attempt_history"]] == [None, 11]
    assert rows["resumable"]["steps_recorded"] == 20
    engine = create_engine(settings.resolved_database_url)
    with engine.connect() as conn:
        steps = conn.execute(select(result_steps.c.step, result_steps.c.cost_usd).where(
            result_steps.c.sandbox_id == resumed["sandbox_id"]).order_by(result_steps.c.step)
        ).all()
    engine.dispose()
    assert [s.step for s in steps] == list(range(1, 21)), "each step exactly once"
    step_cost = sum(s.cost_usd for s in steps)
    assert rows["resumable"]["cost_usd"] == pytest.approx(step_cost)
    assert resumed["cost_usd"] == pytest.approx(step_cost, rel=1e-4)
    keys = set(s3_server.objects(TEST_BUCKET, s3_prefix))
    base = f"snapshots/{run_id}/{resumed['sandbox_id']}"
    assert {f"{base}/attempt-1.sqlite", f"{base}/attempt-2.sqlite",
            f"{base}/resume-for-attempt-2.sqlite"} <= keys, "checkpoints kept in S3"
    assert f"items/{run_id}/{by_template['evals']['sandbox_id']}/items.jsonl" in keys
