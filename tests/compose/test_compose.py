"""compose.yaml brings up every real part on one host: the controller split into two API
replicas behind HAProxy and two reconcilers (Docker backend through the socket),
PostgreSQL and an S3 server. The quick suite run through it with `SIMPLE_TOKEN=… simplectl
--server …` leaves 7 snapshots in the bucket and 7 succeeded rows in PostgreSQL; one
reconciler leads; the API answers through HAProxy with one replica killed; `down` leaves
nothing of the project, sandbox containers included.

The project gets its own name, port and sandbox network; images are those of
scripts/compose-env.sh's choice (registry images, else the local stand-ins).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox_image.contract import LABEL_RUN_ID
from tests.docker_support import connect_docker, ensure_sandbox_image
from tests.services import free_port

pytestmark = [pytest.mark.once, pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(1800)]
REPO_ROOT = Path(__file__).resolve().parents[2]
UP_TIMEOUT_S = 600
RUN_TIMEOUT_S = 900
CONTROLLER_IMAGE = os.environ.get("SIMPLE_CONTROLLER_IMAGE", "simple-controller:latest")


def compose_command() -> list[str]:
    """`docker compose` (v2) when the plugin is there, else Debian's `docker-compose`."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True,
                      check=False).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    from tests.conftest import require_service

    require_service("docker compose", "neither `docker compose` nor `docker-compose` is installed")
    raise AssertionError("unreachable")


@dataclass
class Stack:
    project: str
    env_file: Path
    port: int
    token: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def compose(self, *args: str, timeout: float = UP_TIMEOUT_S) -> str:
        done = subprocess.run(
            [*compose_command(), "-p", self.project, "-f", str(REPO_ROOT / "compose.yaml"),
             "--env-file", str(self.env_file), *args],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, f"compose {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def exec(self, service: str, *command: str) -> str:
        """Run a command in the service's container (the engine's exec: no TTY, no stdin)."""
        client = connect_docker()
        try:
            (container,) = client.containers.list(filters={"label": [
                f"com.docker.compose.project={self.project}",
                f"com.docker.compose.service={service}"]})
            code, output = container.exec_run(list(command), demux=False)
        finally:
            client.close()
        text = output.decode(errors="replace")
        assert code == 0, f"{service}: {command} exited {code}: {text}"
        return str(text)


def ensure_controller_image(client: Any) -> None:
    from docker.errors import ImageNotFound

    try:
        client.images.get(CONTROLLER_IMAGE)
    except ImageNotFound:
        subprocess.run(["bash", str(REPO_ROOT / "docker" / "build-images.sh"), "controller"],
                       cwd=REPO_ROOT, check=True, timeout=1800)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    client = connect_docker()
    ensure_sandbox_image(client)
    ensure_controller_image(client)
    project = "simpletest" + secrets.token_hex(4)
    env_file = tmp_path / "compose.env"
    port = free_port()
    subprocess.run(["bash", str(REPO_ROOT / "scripts" / "compose-env.sh"), "--file",
                    str(env_file), "--port", str(port)], check=True, timeout=1800)
    with env_file.open("a") as f:
        f.write(f"SIMPLE_STACK={project}\nSIMPLE_BIND=127.0.0.1\n")
    token = next(line.split("=", 1)[1] for line in env_file.read_text().splitlines()
                 if line.startswith("SIMPLE_API_TOKEN="))
    stack = Stack(project, env_file, port, token)
    try:
        yield stack
    finally:
        with contextlib.suppress(Exception):
            print(stack.compose("logs", "--no-color", "--tail", "50"))
        # never leave a stack behind: its controller would take the next one's sandboxes
        try:
            stack.compose("down", "-v", "--remove-orphans", timeout=1200)
        finally:
            remove_project(client, project)
        client.close()


def remove_project(client: Any, project: str) -> None:
    """Whatever of the project is still there (containers, its networks, its volumes)."""
    from docker.errors import APIError, NotFound

    label = {"label": f"com.docker.compose.project={project}"}
    for container in client.containers.list(all=True, filters=label):
        with contextlib.suppress(NotFound, APIError):
            container.remove(force=True, v=True)
    for network in [*client.networks.list(filters=label),
                    *client.networks.list(names=[f"{project}-sandboxes"])]:
        with contextlib.suppress(NotFound, APIError):
            network.remove()
    for volume in client.volumes.list(filters=label):
        with contextlib.suppress(NotFound, APIError):
            volume.remove(force=True)


def wait_ready(stack: Stack) -> None:
    deadline = time.monotonic() + UP_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{stack.url}/readyz", timeout=5).status_code == 200:
                return
        time.sleep(1)
    raise AssertionError("the compose controller was not ready in time:\n"
                         + stack.compose("logs", "--no-color", "--tail", "80"))


READYZ = ("import urllib.request; print(urllib.request.urlopen("
          "'http://127.0.0.1:8080/readyz', timeout=10).read().decode())")

S3_COUNT = """
import boto3, os, sys
s3 = boto3.client("s3", endpoint_url=os.environ["SIMPLE_S3_ENDPOINT_URL"],
                  aws_access_key_id=os.environ["SIMPLE_S3_ACCESS_KEY_ID"],
                  aws_secret_access_key=os.environ["SIMPLE_S3_SECRET_ACCESS_KEY"],
                  region_name="us-east-1")
listed = s3.list_objects_v2(Bucket="simple", Prefix="simple/snapshots/" + sys.argv[1] + "/")
print(len(listed.get("Contents", [])))
"""


def test_compose_runs_quick_with_postgres_and_s3(stack: Stack) -> None:
    stack.compose("up", "-d")
    wait_ready(stack)
    # the API needs the token from the env file
    assert httpx.get(f"{stack.url}/v1/runs", timeout=10).status_code == 401
    done = subprocess.run(
        [sys.executable, "-m", "controller.cli", "--server", stack.url,
         "run", "quick", "--wait", "--json"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
        env={**os.environ, "SIMPLE_TOKEN": stack.token},  # never on the command line
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    run_id = report["run_id"]
    assert report["totals"]["succeeded"] == report["totals"]["sandboxes"] == 7

    assert stack.exec("api-1", "python", "-c", S3_COUNT, run_id).strip() == "7"
    # two reconcilers, one leading; the API through HAProxy survives a replica's loss
    leading = [json.loads(stack.exec(name, "python", "-c", READYZ))["leader"]["leading"]
               for name in ("reconciler-1", "reconciler-2")]
    assert sorted(leading) == [False, True], leading
    stack.compose("kill", "api-1")
    answers = [httpx.get(f"{stack.url}/v1/runs/{run_id}", timeout=30,
                         headers={"Authorization": f"Bearer {stack.token}"}).status_code
               for _ in range(20)]
    assert answers == [200] * 20, answers
    sql = (f"SELECT count(*) FROM sandboxes WHERE run_id = '{run_id}' AND status = 'succeeded';"
           f"SELECT count(*) FROM result_runs WHERE run_id = '{run_id}';")
    counts = stack.exec("postgres", "psql", "-U", "simple", "-d", stack.project, "-tAc", sql)
    assert counts.split() == ["7", "7"], counts

    stack.compose("down", "-v", "--remove-orphans")
    client = connect_docker()
    project_label = {"label": f"com.docker.compose.project={stack.project}"}
    try:
        left = client.containers.list(all=True, filters=project_label)
        sandboxes = client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}={run_id}"})
        networks = client.networks.list(names=[f"{stack.project}-sandboxes"])
        volumes = client.volumes.list(filters=project_label)
    finally:
        client.close()
    assert (left, sandboxes, networks, volumes) == ([], [], [], [])
