"""Issue 25, finding 10: `scripts/compose-env.sh --force` rewrote an existing file in
place, keeping a 0644 mode, or following a symlink to wherever it pointed. Now it writes
a new 0600 file next to the target and renames it over (no Docker needed here: the
images are given, and the "socket" is a Unix socket of the test's own)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compose-env.sh"


@pytest.fixture
def fake_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "docker.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    yield path
    sock.close()


def compose_env(target: Path, docker_socket: Path) -> None:
    env = {**os.environ, "DOCKER_HOST": f"unix://{docker_socket}",
           "SIMPLE_POSTGRES_IMAGE": "postgres:16", "SIMPLE_S3_IMAGE": "minio/minio"}
    done = subprocess.run(["bash", str(SCRIPT), "--file", str(target), "--force"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_force_replaces_a_readable_file_with_a_0600_one(tmp_path: Path, fake_socket: Path
                                                        ) -> None:
    target = tmp_path / ".env"
    target.write_text("SIMPLE_API_TOKEN=old\n")
    target.chmod(0o644)
    compose_env(target, fake_socket)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert "SIMPLE_API_TOKEN=old" not in target.read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".compose-env")] == []


def test_force_never_follows_a_symlink(tmp_path: Path, fake_socket: Path) -> None:
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("not yours\n")
    victim.chmod(0o644)
    target = tmp_path / ".env"
    target.symlink_to(victim)
    compose_env(target, fake_socket)
    assert victim.read_text() == "not yours\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert not target.is_symlink() and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert "SIMPLE_API_TOKEN=" in target.read_text()
