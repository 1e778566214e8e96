"""Release artefacts (issue 31): `make release-files` builds the sdist, the wheel and the
packaged chart (version = appVersion = the package's version) into DIST, and
scripts/check-release.sh checks them as a user gets them: the wheel alone in a clean venv,
the sdist building it, the chart linting and rendering, and the images tagged with the
version. Images are checked when SIMPLE_TEST_RELEASE_IMAGES names their prefix ("" for
the plain names, `make release` builds them): the machine's may come from another
checkout, and an image that says another version fails the check. Nothing is pushed;
`make push` refuses to run without a REGISTRY."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from controller import __version__
from tests.packaging.conftest import REPO_ROOT

pytestmark = [pytest.mark.once, pytest.mark.slow, pytest.mark.timeout(1800)]


def helm_binary() -> str:
    cached = REPO_ROOT / ".cache" / "bin" / "helm"
    found = str(cached) if os.access(cached, os.X_OK) else shutil.which("helm")
    if found:
        return found
    message = "helm is not available: run scripts/install-k8s-tools.sh"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def make(*args: str) -> subprocess.CompletedProcess[str]:
    # BIN: this interpreter's venv (with `build`); STAMP empty: no venv is made here
    bin_dir = str(Path(sys.executable).parent)
    return subprocess.run(
        ["make", "--no-print-directory", *args, f"BIN={bin_dir}", "STAMP="],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, check=False,
    )


def test_release_files_are_built_and_pass_the_checks(tmp_path: Path) -> None:
    helm = helm_binary()
    dist = tmp_path / "dist"
    built = make("release-files", f"DIST={dist}", f"HELM={helm}")
    assert built.returncode == 0, built.stdout + built.stderr
    assert sorted(p.name for p in dist.iterdir()) == [
        f"simple-{__version__}.tgz",
        f"simple_orchestrator-{__version__}-py3-none-any.whl",
        f"simple_orchestrator-{__version__}.tar.gz",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("REQUIRE_IMAGES", "CHECK_IMAGES")}
    prefix = os.environ.get("SIMPLE_TEST_RELEASE_IMAGES")
    images = {"CHECK_IMAGES": "0"} if prefix is None else {
        "IMAGE_PREFIX": prefix, "REQUIRE_IMAGES": "1"}
    checked = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "check-release.sh"), str(dist)],
        env={**env, "HELM": helm, "PYTHON": sys.executable, **images},
        capture_output=True, text=True, timeout=900, check=False,
    )
    said = checked.stdout + checked.stderr
    assert checked.returncode == 0, said
    assert f"ok: wheel installs alone in a clean venv: simplectl {__version__}" in said
    assert "no fastapi/uvicorn/sqlalchemy" in said
    assert f"ok: sdist builds simple_orchestrator-{__version__}-py3-none-any.whl" in said
    assert f"version = appVersion = {__version__}, lints, renders" in said
    assert f"checks passed for {__version__}" in said
    if prefix is not None:
        for name in ("simple-controller", "simple-cli"):
            assert f"ok: image {prefix}{name}:{__version__}: simplectl {__version__}" in said
        assert f"ok: image {prefix}simple-sandbox:{__version__}" in said


def test_push_needs_a_registry() -> None:
    refused = make("push", "REGISTRY=")
    assert refused.returncode != 0
    assert "make push: set REGISTRY=host/namespace" in refused.stderr
