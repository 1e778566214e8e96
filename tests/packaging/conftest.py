"""The project as a user installs it: a wheel built from the checkout, installed into a
fresh virtualenv outside it, and `simplectl` run from a neutral directory.

`wheel` builds the wheel once per session; `venv_factory(extras)` makes one fresh
virtualenv per extras spec (also once per session) with the wheel installed from it.
Nothing here imports the checkout: the commands run with the venv's own interpreter, in
a temporary directory, with PYTHONPATH and every SIMPLE_* variable removed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PIP_TIMEOUT_S = 900


@dataclass(frozen=True)
class InstalledVenv:
    """A fresh virtualenv with the project's wheel installed."""

    root: Path

    @property
    def simplectl(self) -> Path:
        return self.root / "bin" / "simplectl"

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without anything that points at the checkout."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SIMPLE_") and k not in {"PYTHONPATH", "VIRTUAL_ENV"}
    }
    env.update(extra)
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built from the checkout (no dependencies)."""
    out = tmp_path_factory.mktemp("wheel")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO_ROOT)],
        cwd=out,
    )
    (built,) = out.glob("simple_orchestrator-*.whl")
    return built


@pytest.fixture(scope="session")
def venv_factory(
    wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], InstalledVenv]:
    """venv_factory("") or venv_factory("all"): a fresh venv with the wheel installed."""
    made: dict[str, InstalledVenv] = {}

    def make(extras: str) -> InstalledVenv:
        if extras not in made:
            root = tmp_path_factory.mktemp(f"venv-{extras or 'plain'}")
            _run([sys.executable, "-m", "venv", str(root)], cwd=root)
            spec = f"{wheel}[{extras}]" if extras else str(wheel)
            _run(
                [str(root / "bin" / "python"), "-m", "pip", "install", "-q",
                 "--disable-pip-version-check", spec],
                cwd=root,
                env=clean_env(),
            )
            made[extras] = InstalledVenv(root)
        return made[extras]

    return make
