"""The session's leak check (tests/leaks.py) finds what it is meant to find: a sandbox
process, a `simple-work-*` directory and a SIMPLE-labelled container made after a moment,
and nothing made before it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.leaks import leftovers


def test_a_sandbox_process_and_a_work_directory_are_found_then_gone() -> None:
    since = time.time() - 1
    work = Path(tempfile.mkdtemp(prefix="simple-work-leaktest-"))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**os.environ, "SIMPLE_SANDBOX_ID": "leak-test"})
    try:
        found = leftovers(since, settle_s=0)
        assert f"directory {work}" in found
        assert any(f.startswith(f"process {child.pid} ") for f in found), found
        assert not any(str(work) in f for f in leftovers(time.time() + 60, settle_s=0))
    finally:
        child.kill()
        child.wait(timeout=10)
        work.rmdir()
    assert not any(str(work) in f or f"process {child.pid} " in f
                   for f in leftovers(since, settle_s=0))


@pytest.mark.docker
def test_a_labelled_container_is_found(tmp_path: Path) -> None:
    from sandbox_image.contract import LABEL_MANAGED_BY, LABEL_MANAGED_BY_VALUE
    from tests.docker_support import connect_docker, ensure_sandbox_image

    client = connect_docker()
    image = ensure_sandbox_image(client)
    since = time.time() - 1
    container = client.containers.create(image, ["true"], name=f"leaktest-{os.getpid()}",
                                         labels={LABEL_MANAGED_BY: LABEL_MANAGED_BY_VALUE})
    try:
        assert f"container {container.name}" in leftovers(since, settle_s=0)
    finally:
        container.remove(force=True)
        client.close()
    assert f"container {container.name}" not in leftovers(since, settle_s=0)
