"""A client that survives restarts (issue 31): `simplectl run --wait` against a served
controller that is stopped for OUTAGE_S (a `helm upgrade`, a node drain) waits, says on
stderr what it waits for, resumes the run's stream, and exits with the run's own code;
a controller gone for longer than `--wait-timeout` is exit 5, never 1.

Before, the client gave up after five reconnections (about 10 s) and exited 1."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ci.conftest import SIMPLECTL, Served, ServeFactory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

OUTAGE_S = 30.0  # three times what the old client survived
# Sleeps through the outage, then reports: its run is still going when the controller
# comes back, so the client must follow it again to see its end.
RESTART_CATALOG = f"""
templates:
  - id: ci_restart
    category: ci-restart
    description: sleeps through a controller restart, then succeeds
    estimate: {{cost_usd: [0.1, 0.5], runtime_s: [40, 60]}}
    timeout_s: 240
    config: {{agents: 2, steps: 2, llm_latency_ms: 5, sleep_s: {OUTAGE_S + 8}}}
"""


@pytest.fixture
def ci_catalog(ci_catalog: Path) -> Path:
    (ci_catalog / "restart.yaml").write_text(RESTART_CATALOG)
    return ci_catalog


def wait_until(check: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.1)


def running_run(served: Served) -> str:
    """The one run's id, once its sandbox runs."""
    found: list[str] = []

    def check() -> bool:
        with served.client() as http:
            runs = http.get("/v1/runs").json()["runs"]
            if not runs:
                return False
            run = http.get(f"/v1/runs/{runs[0]['run_id']}").json()
        found[:] = [run["run_id"]]
        return any(s["status"] == "running" for s in run["sandboxes"])

    wait_until(check, 60, "the run's sandbox runs")
    return found[0]


def follow(served: Served, stderr: Path, *args: str) -> subprocess.Popen[str]:
    """`simplectl run ARGS --json` against `served`, stderr to a file the test reads."""
    with stderr.open("w") as err:
        return subprocess.Popen(
            [*SIMPLECTL, *served.remote("run", *args, "--json")],
            stdout=subprocess.PIPE, stderr=err, text=True, env=served.cli_env,
            stdin=subprocess.DEVNULL,
        )


def test_run_wait_survives_a_controller_restart(serve: ServeFactory, tmp_path: Path) -> None:
    served = serve()
    stderr = tmp_path / "client.err"
    client = follow(served, stderr, "ci_restart")
    run_id = running_run(served)

    served.stop()
    stopped = time.monotonic()
    wait_until(lambda: "does not answer" in stderr.read_text(), 30, "the client says it waits")
    while time.monotonic() - stopped < OUTAGE_S:  # the outage itself: the client must hold on
        assert client.poll() is None, f"the client gave up:\n{stderr.read_text()}"
        time.sleep(0.2)
    served.start_again()

    out, _ = client.communicate(timeout=180)
    said = stderr.read_text()
    assert client.returncode == 0, said
    report = json.loads(out)
    assert report["run_id"] == run_id and report["status"] == "succeeded", report
    assert f"the controller at {served.url} does not answer" in said
    assert "--wait-timeout" in said and "to resume the event stream" in said, said
    assert "answers again after" in said, said
    # one stream followed across the restart: the run's start is told once, its end once
    assert said.count(f"run {run_id}: running") == 1, said
    assert said.count(f"run {run_id}: succeeded") == 1, said


def test_a_controller_gone_past_wait_timeout_is_exit_5(serve: ServeFactory, tmp_path: Path) -> None:
    served = serve()
    stderr = tmp_path / "client.err"
    client = follow(served, stderr, "ci_slow", "--wait-timeout", "6s")
    running_run(served)

    served.stop()
    stopped = time.monotonic()
    code = client.wait(timeout=60)
    waited = time.monotonic() - stopped
    said = stderr.read_text()
    assert code == 5, said
    assert waited >= 6, f"gave up after {waited:.1f} s, before --wait-timeout"
    assert "does not answer" in said
    assert f"cannot reach the SIMPLE server at {served.url}: gave up after waiting 6 s" in said
    assert client.stdout is not None and client.stdout.read() == "", "no report: no run's end"
