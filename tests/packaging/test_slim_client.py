"""The base install is the client (issue 31): the wheel installed without extras, outside
the checkout, has no FastAPI, uvicorn or SQLAlchemy, answers `--version`, runs a suite on
a served controller (`simplectl serve` from the dev venv), and says in one line which
extra the embedded controller needs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from controller import __version__
from tests.ci.conftest import ServeFactory, ci_catalog, serve  # noqa: F401  (fixtures)
from tests.packaging.conftest import InstalledVenv
from tests.packaging.test_wheel import simplectl

pytestmark = [pytest.mark.once, pytest.mark.slow, pytest.mark.timeout(1800)]
SERVER_ONLY = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "starlette", "pydantic_settings",
               "jinja2", "yaml", "prometheus_client")


def test_the_base_install_has_no_server_packages(
    venv_factory: Callable[[str], InstalledVenv], tmp_path: Path
) -> None:
    venv = venv_factory("")
    probe = "import importlib.util as u, json, sys; print(json.dumps(" \
            "[m for m in sys.argv[1:] if u.find_spec(m)]))"
    found = subprocess.run([str(venv.python), "-c", probe, *SERVER_ONLY], cwd=tmp_path,
                           capture_output=True, text=True, check=True)
    assert json.loads(found.stdout) == [], "server packages in the client's install"
    version = simplectl(venv, tmp_path, "--version")
    assert (version.returncode, version.stdout) == (0, f"simplectl {__version__}\n"), version


def test_the_embedded_default_names_the_server_extra(
    venv_factory: Callable[[str], InstalledVenv], tmp_path: Path
) -> None:
    venv = venv_factory("")
    for args in (["run", "quick"], ["status"], ["serve"], ["run", "quick", "--dry-run"]):
        done = simplectl(venv, tmp_path, *args)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "pip install 'simple-orchestrator[server]'" in done.stderr, done.stderr
    assert not (tmp_path / ".simple").exists(), "nothing was started"


def test_the_client_runs_quick_on_a_served_controller(
    venv_factory: Callable[[str], InstalledVenv], serve: ServeFactory, tmp_path: Path  # noqa: F811
) -> None:
    venv = venv_factory("")
    served = serve()
    done = simplectl(venv, tmp_path, "--server", served.url, "run", "quick", "--wait", "--json",
                     env={"SIMPLE_TOKEN": served.token})
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "succeeded"
    assert report["totals"]["succeeded"] == report["totals"]["sandboxes"] == 7
    assert [r["run_id"] for r in served.runs()] == [report["run_id"]]
    status = simplectl(venv, tmp_path, "--server", served.url, "status", report["run_id"],
                       "--json", env={"SIMPLE_TOKEN": served.token})
    assert status.returncode == 0 and json.loads(status.stdout)["status"] == "succeeded"
