"""Interrupts cancel (issue 31): SIGTERM (a CI runner's cancel or timeout) or SIGINT while
`simplectl run --wait` follows a served run cancels that run, prints the server's answer
and exits 4. `--no-cancel-on-interrupt` leaves the run going and says so (exit 128+n);
`--detach` starts and returns at once."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.ci.conftest import SIMPLECTL, Served

pytestmark = pytest.mark.timeout(180)


def following(served: Served, stderr: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """`simplectl run ci_slow ARGS` following its run; returns once it shows the run going."""
    with stderr.open("w") as err:
        client = subprocess.Popen(
            [*SIMPLECTL, *served.remote("run", "ci_slow", *args)],
            stdout=subprocess.PIPE, stderr=err, text=True, env=served.cli_env,
            stdin=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 60
    while "ci_slow: running" not in stderr.read_text():
        assert client.poll() is None, stderr.read_text()
        assert time.monotonic() < deadline, stderr.read_text()
        time.sleep(0.05)
    (run,) = served.runs()
    return client, run["run_id"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupt_cancels_the_served_run_and_exits_4(
    served: Served, tmp_path: Path, signum: signal.Signals
) -> None:
    stderr = tmp_path / "client.err"
    client, run_id = following(served, stderr, "--json")
    client.send_signal(signum)
    out, _ = client.communicate(timeout=30)
    said = stderr.read_text()
    assert client.returncode == 4, said
    assert f"{signum.name}: cancelling run {run_id}" in said
    assert f"run {run_id}: cancel requested, status " in said
    answer = json.loads(out)  # --json: the server's answer to the cancel, on stdout
    assert answer["run_id"] == run_id and answer["cancel_requested"] is True
    assert served.wait_run(run_id, timeout_s=60)["status"] == "cancelled"


def test_no_cancel_on_interrupt_leaves_the_run_going(served: Served, tmp_path: Path) -> None:
    stderr = tmp_path / "client.err"
    client, run_id = following(served, stderr, "--no-cancel-on-interrupt")
    client.send_signal(signal.SIGTERM)
    client.communicate(timeout=30)
    said = stderr.read_text()
    assert client.returncode == 128 + signal.SIGTERM, said
    assert f"run {run_id} goes on (--no-cancel-on-interrupt)" in said
    assert f"simplectl cancel {run_id}" in said
    with served.client() as http:
        run = http.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == "running" and not run["cancel_requested"], run


def test_detach_starts_and_returns_at_once(served: Served) -> None:
    done = served.simplectl(*served.remote("run", "ci_slow", "--detach"), timeout=30)
    assert done.returncode == 0, done.stderr
    (run,) = served.runs()
    assert done.stdout == f"{run['run_id']}\n"
    assert run["status"] in ("pending", "running")


def test_detach_without_a_server_is_exit_2(served: Served) -> None:
    done = served.simplectl("run", "ci_slow", "--detach", timeout=30)
    assert done.returncode == 2, done.stderr
    assert "--detach needs --server" in done.stderr
    assert served.runs() == []
