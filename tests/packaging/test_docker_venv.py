"""Docker out of the box: in a fresh venv with the [all] extras, `simplectl run quick
--backend docker` works with no SIMPLE_* networking variable (the `simple` network and
its gateway listener), and leaves no container behind."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox_image.contract import LABEL_RUN_ID
from tests.docker_support import connect_docker, ensure_sandbox_image
from tests.packaging.conftest import InstalledVenv, clean_env

pytestmark = [
    pytest.mark.once, pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(1800)
]
RUN_TIMEOUT_S = 900


def test_quick_on_docker_with_no_networking_settings(
    venv_factory: Callable[[str], InstalledVenv], tmp_path: Path
) -> None:
    client = connect_docker()
    ensure_sandbox_image(client)
    venv = venv_factory("all")
    env = clean_env()
    assert not [k for k in env if k.startswith("SIMPLE_")]
    done = subprocess.run(
        [str(venv.simplectl), "run", "quick", "--backend", "docker", "--wait", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["totals"]["succeeded"] == report["totals"]["sandboxes"] == 7
    left = client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}={report['run_id']}"})
    for container in left:  # never leave them, even when the assertion below fails
        container.remove(force=True)
    assert left == [], "containers left behind"
    client.close()
