"""`simplectl serve` stops on SIGTERM even while clients follow a run's stream or a
sandbox's logs: they get SHUTDOWN_GRACE_S to hang up, then they are cut, and the
controller closes (reconciler, exit path, backend). Before, uvicorn waited for every
client, so one open dashboard kept the controller up until Kubernetes killed it."""

from __future__ import annotations

import signal
import threading
import time

import httpx

from controller.cli.embedded import SHUTDOWN_GRACE_S
from tests.ci.conftest import Served


def follow(served: Served, path: str, first_line: threading.Event, ended: threading.Event) -> None:
    """GET `path` as a stream, until the server ends it."""
    try:
        with (
            httpx.Client(base_url=served.url, headers=served.headers, timeout=None) as http,
            http.stream("GET", path) as response,
        ):
            for _line in response.iter_lines():
                first_line.set()
    except httpx.HTTPError:
        pass  # cut by the server: what this test waits for
    finally:
        first_line.set()
        ended.set()


def running_sandbox(served: Served, run_id: str) -> str:
    """The run's sandbox, once it runs."""
    with served.client() as http:
        for _ in range(300):
            sandbox = http.get(f"/v1/runs/{run_id}").json()["sandboxes"][0]
            if sandbox["status"] == "running":
                return str(sandbox["sandbox_id"])
            time.sleep(0.1)
    raise AssertionError(f"the sandbox of {run_id} did not start")


def test_sigterm_stops_the_server_with_streams_open(served: Served) -> None:
    with served.client() as http:
        run = http.post("/v1/runs", json={"templates": ["ci_slow"]}).raise_for_status().json()
    run_id = run["run_id"]  # ci_slow sleeps a minute: both streams stay open
    sandbox_id = running_sandbox(served, run_id)
    ended = []
    for path in (f"/v1/runs/{run_id}/stream", f"/v1/sandboxes/{sandbox_id}/logs?follow=true"):
        first, done = threading.Event(), threading.Event()
        threading.Thread(target=follow, args=(served, path, first, done), daemon=True).start()
        assert first.wait(30) and not done.is_set(), f"{path} is not streaming"
        ended.append(done)
    served.process.send_signal(signal.SIGTERM)
    code = served.process.wait(timeout=SHUTDOWN_GRACE_S + 20)  # TimeoutExpired: it hung
    # uvicorn re-raises the signal once it has shut down: the exit says SIGTERM, cleanly
    assert code == -signal.SIGTERM
    assert all(done.wait(5) for done in ended), "every stream was ended by the server"
    assert "controller stopped" in served.log()
