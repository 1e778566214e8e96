"""Finding 6: the process backend could be turned against the controller.

A sandbox rewrote its `child.json` with the controller's process group, so cancelling
the run shut the controller down; another read `simple.db`, whose token hashes keyed
the upload signatures, and forged another sandbox's upload; the memory limit counted
only the direct child.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from controller.settings import Settings
from tests.ci.conftest import Served
from tests.e2e_helpers import wait_for


def sandbox_id_of(served: Served, run_id: str) -> str:
    with served.client() as http:
        return str(http.get(f"/v1/runs/{run_id}").json()["sandboxes"][0]["sandbox_id"])


def logs_of(served: Served, sandbox_id: str) -> str:
    with served.client() as http:
        return http.get(f"/v1/sandboxes/{sandbox_id}/logs").text


def test_a_sandbox_cannot_make_the_controller_signal_itself(
    served: Served, tmp_path: Path
) -> None:
    (tmp_path / "escape_script.input").write_text(str(served.process.pid))
    with served.client() as http:
        run_id = http.post("/v1/runs", json={"templates": ["escape_group"]}).json()["run_id"]
    sandbox_id = sandbox_id_of(served, run_id)
    wait_for(lambda: "READY" in logs_of(served, sandbox_id), timeout_s=60, what="the rewrite")
    assert "REWROTE child.json" in logs_of(served, sandbox_id)
    with served.client() as http:
        assert http.post(f"/v1/runs/{run_id}/cancel").status_code in (200, 202)
    finished = served.wait_run(run_id, timeout_s=60)
    assert finished["status"] == "cancelled"
    deadline = time.monotonic() + 8  # a signalled controller shuts down within seconds
    while time.monotonic() < deadline:
        assert "Shutting down" not in served.log(), "the controller was signalled"
        assert served.process.poll() is None, "the controller was signalled by its sandbox"
        time.sleep(0.2)
    assert httpx.get(f"{served.url}/healthz", timeout=5).status_code == 200


def test_the_database_does_not_hold_what_signs_uploads(served: Served, settings: Settings) -> None:
    """With the token hash read from the database, a forged upload URL is refused."""
    with served.client() as http:
        run_id = http.post("/v1/runs", json={"templates": ["quiet"]}).json()["run_id"]
    victim = sandbox_id_of(served, run_id)
    wait_for(lambda: "quiet sandbox" in logs_of(served, victim), timeout_s=60, what="start")
    engine = create_engine(settings.resolved_database_url)
    with engine.connect() as conn:
        token_hash, attempt = conn.execute(
            text("SELECT token_hash, attempt FROM sandboxes WHERE id = :id"), {"id": victim}
        ).one()
    engine.dispose()
    # What the database alone lets one compute: an HMAC keyed by the token hash.
    message = f"{victim}:{attempt}:snapshot".encode()
    forged = hmac.new(token_hash.encode(), message, hashlib.sha256).hexdigest()
    response = httpx.put(
        f"{served.url}/v1/sandboxes/{victim}/snapshot",
        params={"attempt": attempt, "signature": forged},
        content=b"SQLite format 3\x00forged",
        timeout=10,
    )
    assert response.status_code == 401, response.text
    with served.client() as http:
        http.post(f"/v1/runs/{run_id}/cancel")


@pytest.mark.once
def test_the_memory_limit_covers_the_whole_process_group(served: Served) -> None:
    with served.client() as http:
        run_id = http.post("/v1/runs", json={"templates": ["memory_hog"]}).json()["run_id"]
    finished = served.wait_run(run_id, timeout_s=90)
    sandbox = finished["sandboxes"][0]
    assert sandbox["status"] == "oom", sandbox


def test_sandboxes_work_outside_the_data_directory(served: Served) -> None:
    """The data directory holds the database, the store and the signing key."""
    with served.client() as http:
        run_id = http.post("/v1/runs", json={"templates": ["quiet"]}).json()["run_id"]
    sandbox_id = sandbox_id_of(served, run_id)
    wait_for(lambda: "CWD " in logs_of(served, sandbox_id), timeout_s=60, what="its cwd")
    cwd = Path(logs_of(served, sandbox_id).split("CWD ", 1)[1].splitlines()[0])
    assert not cwd.resolve().is_relative_to(served.data_dir.resolve()), cwd
    with served.client() as http:
        http.post(f"/v1/runs/{run_id}/cancel")
    served.wait_run(run_id, timeout_s=60)
    assert not cwd.exists()  # removed with the sandbox
