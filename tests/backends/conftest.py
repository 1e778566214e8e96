"""Fixtures for backend tests: sandbox specs, and a real Docker engine with our sandbox image.

Docker tests skip when no engine is reachable, except in CI (CI=true) where a
missing engine is a failure. Each test gets its own run id; everything it
created is found by that label and removed afterwards, and nothing else is touched.
"""

from __future__ import annotations

import contextlib
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.backends.base import Resources, SandboxSpec
from controller.backends.process.backend import ProcessBackend
from controller.settings import Settings
from sandbox_image.contract import (
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_RUN_ID,
    SandboxEnv,
)
from tests.docker_support import SANDBOX_IMAGE, connect_docker, ensure_sandbox_image
from tests.sandbox_python import open_dir, sandbox_python  # noqa: F401

DUMMY_CONTROLLER_URL = "http://127.0.0.1:9"  # discard port: nothing answers

MakeSpec = Callable[..., SandboxSpec]


@pytest.fixture
def make_spec() -> MakeSpec:
    """Build a SandboxSpec; keyword arguments override the defaults."""

    def build(
        sandbox_id: str = "sbx-1",
        *,
        run_id: str = "run-1",
        command: tuple[str, ...] | list[str] = ("python", "-m", "sandbox_image"),
        image: str = SANDBOX_IMAGE,
        attempt: int = 1,
        cpu: str | None = None,
        memory: str | None = None,
        pids: int = 256,
        timeout_s: int = 60,
    ) -> SandboxSpec:
        env = SandboxEnv(
            sandbox_id=sandbox_id,
            run_id=run_id,
            template_id="board_meeting",
            attempt=attempt,
            template_config={"agents": 2, "steps": 3},
            seed=7,
            controller_url=DUMMY_CONTROLLER_URL,
            sandbox_token="token-" + sandbox_id,
            snapshot_url=f"{DUMMY_CONTROLLER_URL}/v1/sandboxes/{sandbox_id}/snapshot",
        )
        return SandboxSpec(
            env=env,
            image=image,
            command=tuple(command),
            timeout_s=timeout_s,
            resources=Resources(cpu=cpu, memory=memory, pids=pids),
        )

    return build


@pytest.fixture
def process_backends(tmp_path: Path) -> Iterator[Callable[..., ProcessBackend]]:
    """ProcessBackend(settings on tmp_path, keyword arguments overriding them); its
    sandboxes stopped and its working directories (outside tmp_path) removed afterwards."""
    made: list[ProcessBackend] = []

    def make(**overrides: Any) -> ProcessBackend:
        settings = Settings(
            data_dir=tmp_path / "data",
            database_url=f"sqlite:///{tmp_path / 'data' / 'simple.db'}",
            **{"process_user": "self", **overrides},
        )
        made.append(ProcessBackend(settings))
        return made[-1]

    yield make
    for backend in made:
        for seen in backend.observe():
            backend.stop(seen.sandbox_id)
    time.sleep(0.2 if made else 0)
    for backend in made:
        backend.close()
        shutil.rmtree(backend.work_root, ignore_errors=True)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A client of the real engine; skip (fail in CI) when there is none."""
    client = connect_docker()
    yield client
    client.close()


@pytest.fixture(scope="session")
def sandbox_image(docker_client: Any) -> str:
    """simple-sandbox:latest, built with docker/build-images.sh if missing (slow once)."""
    return ensure_sandbox_image(docker_client)


@pytest.fixture
def docker_run_id(docker_client: Any) -> Iterator[str]:
    """A run id for this test only; its containers are removed when the test ends."""
    run_id = f"test-{uuid.uuid4().hex[:12]}"
    yield run_id
    from docker.errors import NotFound

    leftovers = docker_client.containers.list(
        all=True,
        ignore_removed=True,
        filters={
            "label": [f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}", f"{LABEL_RUN_ID}={run_id}"]
        },
    )
    for container in leftovers:
        with contextlib.suppress(NotFound):
            container.remove(force=True)
