"""The default Docker networking: no SIMPLE_DOCKER_NETWORK, no SIMPLE_CONTROLLER_URL.

Sandboxes join the `simple` bridge network and reach the controller on its gateway.
From inside a sandbox container, on exactly the address it was given, the API answers
401 (with no token and with the sandbox's own token) while its own events are accepted;
for the embedded controller (session token) and for `simplectl serve` with no API
tokens at all (the gateway listener serves only the sandbox routes).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from controller.backends.docker.network import DEFAULT_NETWORK
from controller.cli.embedded import EmbeddedServer
from controller.settings import Settings
from tests.docker_e2e.conftest import SIMPLECTL, RunContainers, cli_env, free_port
from tests.e2e_helpers import FINAL

pytestmark = [pytest.mark.docker, pytest.mark.once, pytest.mark.slow]
PROBE = (Path(__file__).resolve().parents[1] / "fixtures" / "address_probe.py").read_text()
API_ROUTES = ("list_runs", "list_runs_sandbox_token", "start_run", "start_run_sandbox_token",
              "templates", "own_sandbox_detail")
START_TIMEOUT_S = 60
RUN_TIMEOUT_S = 180


@pytest.fixture
def probe_catalog(catalog_dir: Callable[[str], Path], sandbox_image: str) -> Path:
    command = json.dumps(["python", "-c", PROBE])
    return catalog_dir(
        f"""
        templates:
          - id: address_probe
            category: security
            estimate: {{cost_usd: [0.1, 0.2], runtime_s: [1, 2]}}
            timeout_s: 120
            image: {sandbox_image}
            command: {command}
        """
    )


@pytest.fixture
def default_network_settings(settings: Settings, probe_catalog: Path) -> Settings:
    """The docker backend with nothing said about networking."""
    return settings.model_copy(
        update={"backend": "docker", "docker_network": None, "controller_url": None,
                "catalog_dirs": [probe_catalog]}
    )


def run_probe(url: str, headers: dict[str, str], containers: RunContainers) -> dict[str, Any]:
    """Start the probe template, wait for its end, return its answers from its logs."""
    with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
        response = api.post("/v1/runs", json={"templates": ["address_probe"]})
        assert response.status_code == 201, response.text
        run_id = containers.track(response.json()["run_id"])
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while (run := api.get(f"/v1/runs/{run_id}").json())["status"] not in FINAL:
            assert time.monotonic() < deadline, f"run {run_id} did not end: {run}"
            time.sleep(0.2)
        (sandbox,) = run["sandboxes"]
        logs = api.get(f"/v1/sandboxes/{sandbox['sandbox_id']}/logs").text
    line = next((x for x in logs.splitlines() if x.startswith("ANSWERS ")), None)
    assert line, f"the probe printed no answers: {run}\n{logs}"
    return dict(json.loads(line.removeprefix("ANSWERS ")))


def assert_only_sandbox_routes(answers: dict[str, Any]) -> None:
    assert answers["own_events"] == 200, answers
    for route in API_ROUTES:
        assert answers[route] == 401, (route, answers)


def gateway(docker_engine: Any) -> str:
    network = docker_engine.networks.get(DEFAULT_NETWORK)
    assert network.attrs["Labels"].get("app.kubernetes.io/managed-by") == "simple"
    return str(network.attrs["IPAM"]["Config"][0]["Gateway"])


def test_embedded_sandbox_gets_only_sandbox_routes(
    default_network_settings: Settings, run_containers: RunContainers, docker_engine: Any
) -> None:
    with EmbeddedServer(default_network_settings, session_token=True) as server:
        given = server.settings.controller_url or ""
        assert given.startswith(f"http://{gateway(docker_engine)}:"), given
        assert server.settings.docker_network == DEFAULT_NETWORK
        answers = run_probe(server.url, {"Authorization": f"Bearer {server.token}"},
                            run_containers)
        # the address given to sandboxes refuses the API from the host too
        assert httpx.get(f"{given}/v1/runs", timeout=10).status_code == 401
        assert httpx.get(f"{given}/healthz", timeout=10).status_code == 200
    assert_only_sandbox_routes(answers)


def test_serve_without_tokens_still_gives_sandboxes_only_their_routes(
    default_network_settings: Settings,
    run_containers: RunContainers,
    docker_engine: Any,
    tmp_path: Path,
    probe_catalog: Path,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    env = cli_env(default_network_settings, SIMPLE_CATALOG_DIRS=str(probe_catalog))
    with log.open("wb") as out:
        server = subprocess.Popen(
            [*SIMPLECTL, "serve", "--backend", "docker", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _ready(url):
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        answers = run_probe(url, {}, run_containers)  # loopback: no token configured
        assert httpx.get(f"http://{gateway(docker_engine)}:{port}/v1/runs",
                         timeout=10).status_code == 401
    finally:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=30)
        if server.poll() is None:
            server.kill()
    assert_only_sandbox_routes(answers)


def _ready(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    return False

