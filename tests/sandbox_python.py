"""Process-backend sandboxes as other users: an interpreter they can run, and fixtures.

The suite's own interpreter often lives where only root may go (pyenv under /root,
mode 0700), so a sandbox dropped to an unprivileged uid could not start it. This
builds a virtualenv of the system's python3 in a world-readable directory and copies
in what the built-in runtime imports: `sandbox_image` from the checkout, httpx and its
pure-Python dependencies from this environment. Offline, once per session.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI

REPO = Path(__file__).resolve().parents[1]
# The runtime's imports beyond the standard library: httpx and what it pulls in.
PACKAGES = (
    "httpx", "httpcore", "h11", "anyio", "idna", "certifi", "sniffio", "typing_extensions",
)
SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")


def require_root() -> None:
    """Running sandboxes as other users needs root: a failure in CI (which runs as root)."""
    if os.geteuid() != 0:
        message = "sandboxes run as other users only when the controller runs as root"
        if IN_CI:
            pytest.fail(message + " (CI runs the suite as root)")
        pytest.skip(message)


def system_python() -> str:
    """A python3 (3.11 or newer, with venv) outside any private directory."""
    for candidate in SYSTEM_PYTHONS:
        if os.access(candidate, os.X_OK) and subprocess.run(
            [candidate, "-c", "import sys, venv; assert sys.version_info >= (3, 11)"],
            capture_output=True, timeout=30, check=False,
        ).returncode == 0:
            return candidate
    pytest.fail(f"no python3 >= 3.11 with venv at {' or '.join(SYSTEM_PYTHONS)} "
                "(Debian: apt-get install python3-venv)")


def build(root: Path, base: str) -> Path:
    """A virtualenv of `base` at `root`, readable by all, that imports `sandbox_image`."""
    subprocess.run([base, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120,
                   capture_output=True)
    site = next(root.glob("lib/python3*/site-packages"))
    ignore = shutil.ignore_patterns("__pycache__")
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin, f"{name} is not installed"
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, site / name, ignore=ignore)
        else:
            shutil.copy2(origin, site / origin.name)
    shutil.copytree(REPO / "sandbox_image", site / "sandbox_image", ignore=ignore)
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644 | (path.stat().st_mode & 0o111))
    return root / "bin" / "python"


def open_directory(prefix: str) -> Path:
    """A fresh directory every user may enter and read (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="session")
def sandbox_python() -> Iterator[str]:
    """An interpreter an unprivileged uid can run, with the sandbox runtime."""
    require_root()
    root = open_directory("simple-test-python-")
    try:
        yield str(build(root / "venv", system_python()))
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory others may enter, for what a sandbox must read (or must be refused)."""
    path = open_directory("simple-test-open-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def private_python(sandbox_python: str) -> Iterator[str]:
    """The sandbox interpreter by a path only root can follow (a script in a 0700
    directory), like root's own Python under /root."""
    path = Path(tempfile.mkdtemp(prefix="simple-test-private-"))  # 0700
    try:
        wrapper = path / "python"
        wrapper.write_text(f'#!/bin/sh\nexec {sandbox_python} "$@"\n')
        wrapper.chmod(0o755)
        yield str(wrapper)
    finally:
        shutil.rmtree(path, ignore_errors=True)
