"""PostgreSQL and S3 servers for the tests as containers, through `testcontainers`.

One container per pytest session (tests get a database or a bucket/prefix each; see
tests/services.py). The image: SIMPLE_TEST_POSTGRES_IMAGE / SIMPLE_TEST_S3_IMAGE when
set; else the official image (postgres:16, minio/minio) when it is present or a
registry answers; else the local stand-in built from the Debian base
(simple-postgres:local, simple-s3:local, by docker/build-service-images.sh). Both
speak the official images' interface, so the code below does not care which it got.

Ports are published on 127.0.0.1 only. testcontainers' reaper (Ryuk) is an image from a
registry, so it is off unless TESTCONTAINERS_RYUK_DISABLED says otherwise: every
container carries our labels and its fixture removes it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.docker_support import connect_docker

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

REPO_ROOT = Path(__file__).resolve().parent.parent
POSTGRES_OFFICIAL = "postgres:16"
S3_OFFICIAL = "minio/minio:RELEASE.2025-04-22T22-12-26Z"
LABELS = {"app.kubernetes.io/managed-by": "simple-tests", "simple.dev/test-session": "true"}
PULL_TIMEOUT_S = 120
READY_TIMEOUT_S = 90


def choose_image(client: Any, variable: str, official: str, local: str, what: str) -> str:
    """The image to run: $variable, else `official` if here or pullable, else `local`."""
    from docker.errors import ImageNotFound

    chosen = os.environ.get(variable)
    if chosen:
        return chosen
    try:
        client.images.get(official)
        return official
    except ImageNotFound:
        pass
    pulled = subprocess.run(["docker", "pull", "-q", official], capture_output=True,
                            timeout=PULL_TIMEOUT_S, check=False)
    if pulled.returncode == 0:
        return official
    try:
        client.images.get(local)
    except ImageNotFound:
        subprocess.run(["bash", str(REPO_ROOT / "docker" / "build-service-images.sh"), what],
                       cwd=REPO_ROOT, check=True, timeout=1800)
    return local


def _container(image: str, port: int, env: dict[str, str], command: list[str]) -> Any:
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(image).with_envs(**env).with_command(command)
    container.ports[f"{port}/tcp"] = ("127.0.0.1", None)  # loopback only, a free port
    return container.with_kwargs(labels=LABELS)


def _wait(ready: Any, container: Any, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    problem: Exception | None = None
    while time.monotonic() < deadline:
        try:
            ready()
            return
        except Exception as e:
            problem = e
        container.reload()
        if container.status == "exited":
            break
        time.sleep(0.2)
    logs = b"".join(container.get_logs()).decode(errors="replace")[-3000:]
    container.stop()
    raise RuntimeError(f"{what} container not ready: {problem}\n{logs}")


@dataclass
class PostgresContainer:
    container: Any
    url: str  # SQLAlchemy URL of the `postgres` database, as the superuser

    def remove(self) -> None:
        self.container.stop()


def start_postgres() -> PostgresContainer:
    """A PostgreSQL server in a container; fast (no fsync), like start-postgres.sh --fast."""
    client = connect_docker()
    image = choose_image(client, "SIMPLE_TEST_POSTGRES_IMAGE", POSTGRES_OFFICIAL,
                         "simple-postgres:local", "postgres")
    password = secrets.token_hex(16)
    container = _container(
        image, 5432, {"POSTGRES_USER": "postgres", "POSTGRES_PASSWORD": password},
        ["postgres", "-c", "fsync=off", "-c", "synchronous_commit=off",
         "-c", "full_page_writes=off", "-c", "max_connections=300"],
    ).start()
    port = container.get_exposed_port(5432)
    url = f"postgresql+psycopg://postgres:{password}@127.0.0.1:{port}/postgres"

    def ready() -> None:
        import psycopg

        psycopg.connect(url.replace("+psycopg", ""), connect_timeout=3).close()

    _wait(ready, container, f"PostgreSQL ({image})")
    return PostgresContainer(container, url)


@dataclass
class S3Container:
    container: Any
    endpoint_url: str
    access_key_id: str
    secret_access_key: str

    def remove(self) -> None:
        self.container.stop()


def start_s3() -> S3Container:
    """An S3 server (MinIO or simple-s3:local) in a container."""
    client = connect_docker()
    image = choose_image(client, "SIMPLE_TEST_S3_IMAGE", S3_OFFICIAL, "simple-s3:local", "s3")
    key, secret = "simple" + secrets.token_hex(4), secrets.token_hex(20)
    container = _container(
        image, 9000, {"MINIO_ROOT_USER": key, "MINIO_ROOT_PASSWORD": secret},
        ["server", "/data", "--address", ":9000"],
    ).start()
    endpoint = f"http://127.0.0.1:{container.get_exposed_port(9000)}"

    def ready() -> None:
        import boto3

        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                     aws_secret_access_key=secret, region_name="us-east-1").list_buckets()

    _wait(ready, container, f"S3 ({image})")
    return S3Container(container, endpoint, key, secret)
