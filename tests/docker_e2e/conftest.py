"""Fixtures for SIMPLE end to end on the real Docker engine.

Sandboxes reach the controller through host networking: SIMPLE_DOCKER_NETWORK=host
and a controller on 127.0.0.1. A missing engine or image is a failure in CI and
a skip elsewhere (`require_service`); the sandbox image is built when it is missing.
Every container a test's runs created is found by its `simple.dev/run-id` label
and removed when the test ends, after any controller the test started is gone.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from controller.settings import Settings
from sandbox_image.contract import LABEL_MANAGED_BY, LABEL_MANAGED_BY_VALUE, LABEL_RUN_ID
from tests.docker_support import connect_docker, ensure_sandbox_image
from tests.services import free_port

SIMPLECTL = [sys.executable, "-m", "controller.cli"]
SERVE_START_TIMEOUT_S = 60


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    """A client of the real engine; require_service when there is none."""
    client = connect_docker()
    yield client
    client.close()


@pytest.fixture(scope="session")
def sandbox_image(docker_engine: Any) -> str:
    """simple-sandbox:latest, built with docker/build-images.sh when missing (slow once)."""
    return ensure_sandbox_image(docker_engine)


@pytest.fixture
def docker_settings(settings: Settings, sandbox_image: str) -> Settings:
    """The test settings on the docker backend, sandboxes on the host network."""
    return settings.model_copy(update={"backend": "docker", "docker_network": "host"})


class RunContainers:
    """Finds and removes the containers of one test's runs, by their run-id label."""

    def __init__(self, client: Any, database_url: str) -> None:
        self.client = client
        self.database_url = database_url
        self.run_ids: set[str] = set()

    def track(self, run_id: str) -> str:
        self.run_ids.add(run_id)
        return run_id

    def of_run(self, run_id: str, running_only: bool = False) -> list[Any]:
        """`docker ps -a --filter label=simple.dev/run-id=RUN` as container objects."""
        self.track(run_id)
        filters: dict[str, Any] = {
            "label": [f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}", f"{LABEL_RUN_ID}={run_id}"]
        }
        if running_only:
            filters["status"] = "running"
        return list(self.client.containers.list(all=True, ignore_removed=True, filters=filters))

    def remove_all(self) -> list[str]:
        """Remove every container of every run this test made; the names removed."""
        from docker.errors import APIError, NotFound

        removed = []
        for run_id in sorted(self.run_ids | self._runs_in_database()):
            for container in self.of_run(run_id):
                with contextlib.suppress(NotFound, APIError):
                    container.remove(force=True)
                    removed.append(container.name)
        return removed

    def _runs_in_database(self) -> set[str]:
        """Runs the test created but never saw the id of (it failed before)."""
        from sqlalchemy import create_engine, select
        from sqlalchemy.exc import SQLAlchemyError

        from controller.db.schema import runs

        engine = create_engine(self.database_url)
        try:
            with engine.connect() as conn:
                return {row.id for row in conn.execute(select(runs.c.id))}
        except SQLAlchemyError:
            return set()  # never migrated: no run was created
        finally:
            engine.dispose()


@pytest.fixture
def run_containers(docker_engine: Any, docker_settings: Settings) -> Iterator[RunContainers]:
    """The containers of this test's runs; whatever is left is removed at the end."""
    tracker = RunContainers(docker_engine, docker_settings.resolved_database_url)
    yield tracker
    tracker.remove_all()


def cli_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a `simplectl` subprocess on the test's data dir and database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    env.update(
        SIMPLE_DATA_DIR=str(settings.data_dir),
        SIMPLE_DATABASE_URL=settings.resolved_database_url,
        **extra,
    )
    return env


class ServedController:
    """`simplectl serve --backend docker` as a subprocess, on a fixed loopback port."""

    def __init__(self, settings: Settings, port: int, log_dir: Path, **env: str) -> None:
        self.settings, self.port = settings, port
        self.url = f"http://127.0.0.1:{port}"
        self.log_dir = log_dir
        self.extra_env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.generation = 0

    def start(self) -> ServedController:
        """Start a new server process and wait until it is ready."""
        self.generation += 1
        log = (self.log_dir / f"serve-{self.port}-{self.generation}.log").open("wb")
        env = cli_env(
            self.settings,
            SIMPLE_DOCKER_NETWORK="host",
            SIMPLE_CONTROLLER_URL=self.url,
            SIMPLE_RECONCILE_INTERVAL_S=str(self.settings.reconcile_interval_s),
            SIMPLE_RETRY_BASE_S=str(self.settings.retry_base_s),
            SIMPLE_RETRY_MAX_S=str(self.settings.retry_max_s),
            SIMPLE_LOST_GRACE_S=str(self.settings.lost_grace_s),
            **self.extra_env,
        )
        self.process = subprocess.Popen(
            [*SIMPLECTL, "serve", "--backend", "docker", "--port", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()
        deadline = time.monotonic() + SERVE_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"simplectl serve exited {self.process.returncode}:\n" + self.output()
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return self
            time.sleep(0.1)
        raise AssertionError(f"simplectl serve was not ready in time:\n{self.output()}")

    def kill_9(self) -> None:
        """SIGKILL: no shutdown hook runs, the sandboxes are left as they are."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def output(self) -> str:
        """What every server generation printed, for failure messages."""
        return "\n".join(
            path.read_text(errors="replace")[-4000:]
            for path in sorted(self.log_dir.glob(f"serve-{self.port}-*.log"))
        )


ServeDocker = Callable[..., ServedController]


@pytest.fixture
def serve_docker(
    docker_settings: Settings, run_containers: RunContainers, tmp_path: Path
) -> Iterator[ServeDocker]:
    """Make `simplectl serve` controllers (not started) on a free port each.

    Keyword arguments become environment variables (SIMPLE_CATALOG_DIRS=...). They
    are killed at the end, before `run_containers` removes what is left.
    """
    servers: list[ServedController] = []

    def make(**env: str) -> ServedController:
        server = ServedController(docker_settings, free_port(), tmp_path, **env)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()
