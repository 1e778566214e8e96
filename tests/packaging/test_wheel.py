"""The wheel is a real package: installed outside the checkout it runs the quick suite,
carries its catalog and migrations, and names the extra a missing backend needs."""

from __future__ import annotations

import json
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.packaging.conftest import InstalledVenv, clean_env

pytestmark = [pytest.mark.once, pytest.mark.slow, pytest.mark.timeout(1800)]
RUN_TIMEOUT_S = 600


def simplectl(
    venv: InstalledVenv, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv.simplectl), *args],
        cwd=cwd,
        env=clean_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def test_wheel_carries_catalog_and_migrations(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "controller/catalog/builtin/quick.yaml" in names
    assert "controller/catalog/builtin/suites.yaml" in names
    assert "controller/db/migrations/env.py" in names
    assert "controller/db/migrations/script.py.mako" in names
    assert any(n.startswith("controller/db/migrations/versions/0001_") for n in names)
    assert not any(n.startswith(("catalog/", "tests/")) for n in names)


def test_installed_wheel_runs_quick_from_a_neutral_directory(
    venv_factory: Callable[[str], InstalledVenv], tmp_path: Path
) -> None:
    venv = venv_factory("server")
    done = simplectl(venv, tmp_path, "run", "quick", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "succeeded", report
    assert report["totals"]["succeeded"] == report["totals"]["sandboxes"] == 7
    # the embedded default kept its state in the neutral directory, nowhere else
    assert (tmp_path / ".simple" / "simple.db").exists()


def test_ordinary_commands_print_nothing_on_stderr(
    venv_factory: Callable[[str], InstalledVenv], tmp_path: Path
) -> None:
    venv = venv_factory("server")
    for args in (["plan", "quick"], ["templates"]):
        done = simplectl(venv, tmp_path, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stderr == "", f"simplectl {' '.join(args)}: {done.stderr}"
        assert done.stdout


@pytest.mark.parametrize(
    ("args", "env", "extra"),
    [
        (["run", "quick", "--backend", "docker"], {}, "docker"),
        (["run", "quick", "--backend", "kubernetes"], {}, "kubernetes"),
        (["run", "quick"], {"SIMPLE_STORE_URL": "s3://bucket/prefix"}, "s3"),
        (["plan", "quick"], {"SIMPLE_DATABASE_URL": "postgresql+psycopg://u:p@127.0.0.1:9/db"},
         "postgres"),
    ],
    ids=["docker", "kubernetes", "s3", "postgres"],
)
def test_missing_extra_exits_2_naming_it(
    venv_factory: Callable[[str], InstalledVenv],
    tmp_path: Path,
    args: list[str],
    env: dict[str, str],
    extra: str,
) -> None:
    venv = venv_factory("server")
    done = simplectl(venv, tmp_path, *args, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert f"pip install 'simple-orchestrator[{extra}]'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
