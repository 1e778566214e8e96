# ruff: noqa: F811 - the fixtures imported from tests.services are parameters here
"""The production parts for real: the whole controller on PostgreSQL and an S3 bucket.

An embedded controller with SIMPLE_DATABASE_URL on a real PostgreSQL server and
SIMPLE_STORE_URL=s3://bucket/prefix on a real S3 server (rclone, checking
signatures) runs the `quick` suite with the process backend and the real sandbox
runtime. Sandboxes get presigned URLs and no credentials; the report's totals are
what the snapshot objects in the bucket hold; logs are archived to the bucket; a
controller restarted mid-run, or an S3 outage mid-run, loses nothing.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from controller.attempts.urls import URL_SLACK_S
from controller.backends.base import SandboxSpec
from controller.cli.embedded import EmbeddedServer
from controller.db.schema import result_runs
from controller.settings import Settings
from sandbox_image.contract import ENV_NAMES
from tests.e2e_helpers import report, start_run, wait_for, wait_run
from tests.services import (  # noqa: F401 - fixtures
    TEST_BUCKET,
    RcloneS3Server,
    S3Server,
    free_port,
    pg_server,
    pg_server_url,
    s3_prefix,
    s3_private_server,
    s3_server,
)

pytestmark = [pytest.mark.postgres, pytest.mark.s3, pytest.mark.slow]
QUICK = ["board_meeting", "jefferson_dinner", "hospital_crisis", "kami_shrine",
         "detective_prospection", "vc_pitch_pearl", "vc_pitch_roadshow"]


def production_settings(tmp_path: Path, database_url: str, s3: S3Server,
                        prefix: str) -> Settings:
    return Settings(data_dir=tmp_path / "data", database_url=database_url, retry_base_s=0.05,
                    retry_max_s=0.2, reconcile_interval_s=0.2, lost_grace_s=10.0,
                    **s3.settings_update(TEST_BUCKET, prefix))


def recording_launches(server: EmbeddedServer) -> list[SandboxSpec]:
    """Every SandboxSpec the backend is asked to launch, as it was given."""
    backend = server.controller.backend
    launched: list[SandboxSpec] = []
    launch = backend.launch

    def record(spec: SandboxSpec) -> None:
        launched.append(spec)
        launch(spec)

    backend.launch = record  # type: ignore[method-assign]
    return launched


def snapshot_sums(objects: dict[str, bytes], run_id: str) -> dict[str, Any]:
    """Totals read straight from the snapshot objects of `run_id` in the bucket."""
    sums = {"cost_usd": 0.0, "tokens_used": 0, "llm_calls": 0, "entities_created": 0,
            "timepoints_created": 0}
    mechanisms: set[str] = set()
    snapshots = {k: v for k, v in objects.items() if k.startswith(f"snapshots/{run_id}/")}
    for data in snapshots.values():
        with tempfile.NamedTemporaryFile(suffix=".sqlite") as handle:
            handle.write(data)
            handle.flush()
            conn = sqlite3.connect(handle.name)
            for row in conn.execute("SELECT cost_usd, tokens_used, llm_calls, entities_created, "
                                    "timepoints_created, mechanisms_used FROM runs"):
                for key, value in zip(sums, row, strict=False):
                    sums[key] += value
                mechanisms.update(json.loads(row[5]))
            conn.close()
    return {**sums, "mechanisms": sorted(mechanisms, key=lambda m: int(m[1:])),
            "snapshots": len(snapshots)}


def assert_totals_match_bucket(totals: dict[str, Any], bucket: dict[str, Any]) -> None:
    assert totals["cost_usd"] == pytest.approx(bucket["cost_usd"], abs=1e-6)
    for key in ("tokens_used", "llm_calls", "entities_created", "timepoints_created"):
        assert totals[key] == bucket[key], key
    assert totals["mechanisms_covered"] == bucket["mechanisms"]


def test_quick_suite_on_postgres_and_s3(tmp_path: Path, pg_server_url: str,
                                        s3_server: S3Server, s3_prefix: str) -> None:
    settings = production_settings(tmp_path, pg_server_url, s3_server, s3_prefix)
    server = EmbeddedServer(settings)
    launched = recording_launches(server)
    with server:
        assert httpx.get(f"{server.url}/readyz").json()["status"] == "ready"
        run_id = start_run(server.url, {"names": ["quick"]})
        run = wait_run(server.url, run_id, timeout_s=180)
        result = report(server.url, run_id)
        archived = {s["sandbox_id"]: httpx.get(f"{server.url}/v1/sandboxes/{s['sandbox_id']}"
                                                f"/logs").text for s in run["sandboxes"]}
        rendered = [server.controller.backend.render(spec) for spec in launched]
    assert run["status"] == "succeeded"
    assert sorted(s["template_id"] for s in run["sandboxes"]) == sorted(QUICK)
    assert result["totals"]["succeeded"] == 7

    # Each sandbox got a presigned URL for its own snapshot key, and no credentials.
    assert len(launched) == 7
    for spec, render in zip(launched, rendered, strict=True):
        url = urlparse(spec.env.snapshot_url)
        query = parse_qs(url.query)
        assert f"{url.scheme}://{url.netloc}" == s3_server.endpoint_url
        assert url.path == (f"/{TEST_BUCKET}/{s3_prefix}/snapshots/{run_id}/"
                            f"{spec.sandbox_id}/attempt-1.sqlite")
        assert query["X-Amz-Expires"] == [str(spec.timeout_s + URL_SLACK_S)]
        assert "X-Amz-Signature" in query
        environment = render["env"]
        assert set(environment) == set(ENV_NAMES)
        flat = json.dumps(render)
        assert s3_server.secret_access_key not in flat
        assert pg_server_url.rpartition("@")[2] not in flat
        assert "AWS_" not in flat and "postgresql" not in flat

    # The report's totals are the sums of the snapshot objects in the bucket.
    objects = s3_server.objects(TEST_BUCKET, s3_prefix)
    bucket = snapshot_sums(objects, run_id)
    assert bucket["snapshots"] == 7
    assert_totals_match_bucket(result["totals"], bucket)

    # Logs were archived to the bucket, and the API serves them from there.
    for sandbox in run["sandboxes"]:
        key = f"logs/{run_id}/{sandbox['sandbox_id']}/attempt-1.log"
        assert objects[key], key
        assert b"snapshot uploaded" in objects[key]
        assert archived[sandbox["sandbox_id"]] == objects[key].decode()


def _sandboxes(url: str, run_id: str) -> list[dict[str, Any]]:
    return list(httpx.get(f"{url}/v1/runs/{run_id}", timeout=10).json()["sandboxes"])


def test_restart_mid_run_on_the_same_database_and_store(
    tmp_path: Path, pg_server_url: str, s3_server: S3Server, s3_prefix: str
) -> None:
    """Stopped while sandboxes run and others wait; a new controller finishes the run."""
    settings = production_settings(tmp_path, pg_server_url, s3_server, s3_prefix)
    port = free_port()  # the controller's address outlives it, as a Service's would
    with EmbeddedServer(settings, port=port) as first:
        run_id = start_run(first.url, {"names": ["quick"], "max_parallel": 2})
        wait_for(lambda: sum(1 for s in _sandboxes(first.url, run_id) if s["step"]) >= 1,
                 what="a sandbox reporting progress")
        before = _sandboxes(first.url, run_id)
    assert any(s["status"] == "pending" for s in before), "stopped too late to mean anything"
    with EmbeddedServer(settings, port=port) as second:
        run = wait_run(second.url, run_id, timeout_s=180)
        result = report(second.url, run_id)
        with second.controller.engine.connect() as conn:
            loaded = [r.sandbox_id for r in conn.execute(
                result_runs.select().where(result_runs.c.run_id == run_id))]
    assert run["status"] == "succeeded"
    assert sorted(s["template_id"] for s in run["sandboxes"]) == sorted(QUICK)
    assert [s["status"] for s in run["sandboxes"]] == ["succeeded"] * 7
    assert [s["attempts"] for s in run["sandboxes"]] == [1] * 7, "adopted, not relaunched"
    assert sorted(loaded) == sorted(s["sandbox_id"] for s in run["sandboxes"])
    bucket = snapshot_sums(s3_server.objects(TEST_BUCKET, s3_prefix), run_id)
    assert bucket["snapshots"] == 7
    assert_totals_match_bucket(result["totals"], bucket)


def test_s3_outage_mid_run_loses_nothing(tmp_path: Path, pg_server_url: str,
                                         s3_private_server: RcloneS3Server) -> None:
    """S3 stops while sandboxes run: they retry their uploads, the controller its reads."""
    settings = production_settings(tmp_path, pg_server_url, s3_private_server, "outage")
    with EmbeddedServer(settings) as server:
        run_id = start_run(server.url, {"names": ["quick"], "max_parallel": 7})
        wait_for(lambda: any(s["step"] for s in _sandboxes(server.url, run_id)),
                 what="a sandbox reporting progress")
        s3_private_server.stop()
        try:
            ready = httpx.get(f"{server.url}/readyz", timeout=30)
            assert ready.status_code == 503
            assert "unreachable" in ready.json()["error"]["message"]
            # Sandboxes end their work meanwhile: their uploads must wait for the store.
            wait_for(lambda: any(s["step"] and s["step"] == s["steps_total"]
                                 for s in _sandboxes(server.url, run_id)),
                     timeout_s=60, what="a sandbox at its last step")
            time.sleep(1.5)
        finally:
            s3_private_server.start()
        run = wait_run(server.url, run_id, timeout_s=180)
        result = report(server.url, run_id)
    assert run["status"] == "succeeded", run
    assert result["totals"]["succeeded"] == 7
    objects = s3_private_server.objects(TEST_BUCKET, "outage")
    bucket = snapshot_sums(objects, run_id)
    assert bucket["snapshots"] == 7
    assert_totals_match_bucket(result["totals"], bucket)
    logs = [data for key, data in objects.items() if key.startswith(f"logs/{run_id}/")]
    assert len(logs) == 7
    assert any(b"snapshot upload attempt 1 failed" in log for log in logs), "no upload retried"


@pytest.mark.parametrize("problem", ["missing bucket", "wrong secret", "server down"])
def test_readyz_names_what_is_wrong_with_the_store(
    problem: str, tmp_path: Path, pg_server_url: str, s3_server: S3Server, s3_prefix: str
) -> None:
    settings = production_settings(tmp_path, pg_server_url, s3_server, s3_prefix)
    update, expected = {
        "missing bucket": ({"store_url": "s3://no-such-bucket/p"}, "does not exist"),
        "wrong secret": ({"s3_secret_access_key": "wrong"}, "refused the credentials"),
        "server down": ({"s3_endpoint_url": f"http://127.0.0.1:{free_port()}"},
                        "unreachable"),
    }[problem]
    with EmbeddedServer(settings.model_copy(update=update)) as server:
        response = httpx.get(f"{server.url}/readyz", timeout=30)
    assert response.status_code == 503
    assert expected in response.json()["error"]["message"]
