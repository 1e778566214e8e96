# ruff: noqa: F811 - the fixtures imported from tests.services are parameters here
"""A staged run on a real S3 server: the later stage's SIMPLE_INPUT_URL is a presigned
GET of the one input object (no credentials), the gather step reads it, and
`verify` re-hashes the snapshot objects in the bucket."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
import yaml

from controller.backends.base import SandboxSpec
from controller.cli.embedded import EmbeddedServer
from controller.settings import Settings
from controller.store.base import snapshot_key, stage_input_key
from tests.e2e_helpers import start_run, wait_run
from tests.services import (  # noqa: F401 - fixtures
    TEST_BUCKET,
    S3Server,
    s3_prefix,
    s3_server,
    s3_settings,
)

pytestmark = [pytest.mark.s3, pytest.mark.once]


def test_a_later_stage_reads_its_input_through_a_presigned_url(
    s3_settings: Settings, s3_server: S3Server, s3_prefix: str,
    catalog_dir: Callable[[str], Path], tmp_path: Path,
) -> None:
    small = {"estimate": {"cost_usd": [0.01, 0.2], "runtime_s": [1, 5]}, "category": "s3stage"}
    catalog = catalog_dir(yaml.safe_dump({"templates": [
        {"id": "scout_a", **small, "config": {"agents": 2, "steps": 1, "llm_latency_ms": 1}},
        {"id": "scout_b", **small, "config": {"agents": 2, "steps": 1, "llm_latency_ms": 1}},
        {"id": "gatherer", **small, "config": {"agents": 2, "steps": 1, "gather": True}},
    ]}))
    server = EmbeddedServer(s3_settings.model_copy(update={"catalog_dirs": [catalog]}))
    launched: list[SandboxSpec] = []
    launch = server.controller.backend.launch

    def record(spec: SandboxSpec) -> None:
        launched.append(spec)
        launch(spec)

    server.controller.backend.launch = record  # type: ignore[method-assign]
    stages = [{"templates": ["scout_a", "scout_b"], "policy": "all"},
              {"templates": ["gatherer"], "policy": "all"}]
    with server:
        run_id = start_run(server.url, {"stages": stages})
        run = wait_run(server.url, run_id, 120)
        verdict = httpx.get(f"{server.url}/v1/runs/{run_id}/verify", timeout=60).json()
    assert run["status"] == "succeeded", run
    assert verdict["ok"] and verdict["snapshots"] == 3, verdict
    gather = next(s for s in launched if s.env.template_id == "gatherer")
    assert all(s.env.input_url is None for s in launched if s is not gather)
    url = urlparse(gather.env.input_url or "")
    assert f"{url.scheme}://{url.netloc}" == s3_server.endpoint_url
    assert url.path.endswith(f"/{s3_prefix}/{stage_input_key(run_id, 1)}")
    assert "X-Amz-Signature" in parse_qs(url.query)
    assert "secret" not in str(gather.env.to_environ()).lower()
    objects = s3_server.objects(TEST_BUCKET, s3_prefix)
    sandbox = next(s for s in run["sandboxes"] if s["template_id"] == "gatherer")
    copy = tmp_path / "gatherer.sqlite"
    copy.write_bytes(objects[snapshot_key(run_id, sandbox["sandbox_id"], 1)])
    conn = sqlite3.connect(copy)
    try:
        read = sorted(r[0] for r in conn.execute("SELECT template_id FROM input_runs"))
    finally:
        conn.close()
    assert read == ["scout_a", "scout_b"]
