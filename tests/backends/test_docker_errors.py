"""`simplectl run --backend docker` fails in one line that says what to do: the engine is
not running, its socket refuses us, or an image the run needs is missing. Never a
traceback, and nothing is started."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_service
from tests.docker_support import connect_docker

TIMEOUT_S = 120


def simplectl_docker(tmp_path: Path, *prefix: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    clean.update(SIMPLE_DATA_DIR=str(tmp_path / "data"), **env)
    return subprocess.run(
        [*prefix, sys.executable, "-m", "controller.cli", "run", "quick", "--backend", "docker"],
        cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def closed_socket(tmp_path: Path) -> Iterator[Path]:
    """A unix socket nobody may open (mode 000), listening."""
    path = tmp_path / "docker.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    path.chmod(0)
    yield path
    server.close()


def test_engine_not_running(tmp_path: Path) -> None:
    done = simplectl_docker(tmp_path, DOCKER_HOST=f"unix://{tmp_path / 'absent.sock'}")
    assert done.returncode == 1
    line = one_line(done)
    assert "the Docker engine is not reachable" in line and "start Docker" in line


def test_permission_denied_on_the_socket(tmp_path: Path, closed_socket: Path) -> None:
    if shutil.which("setpriv") is None:
        require_service("setpriv", "util-linux's setpriv is not installed")
    # root passes any file mode; without CAP_DAC_OVERRIDE it gets EACCES like anyone else
    prefix = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--")
    done = simplectl_docker(tmp_path, *prefix, DOCKER_HOST=f"unix://{closed_socket}")
    assert done.returncode == 1
    line = one_line(done)
    assert f"permission denied on the Docker socket ({closed_socket})" in line
    assert "docker group" in line


@pytest.mark.docker
def test_missing_image(tmp_path: Path) -> None:
    connect_docker().close()
    done = simplectl_docker(tmp_path, SIMPLE_DEFAULT_IMAGE="simple-absent:never")
    assert done.returncode == 2
    line = one_line(done)
    assert "image simple-absent:never is not in the Docker engine" in line
    assert "make images" in line
