"""What the Docker tests share: the engine (a failure in CI when missing), our sandbox
image (built when missing), and a probe script that reports a container's hardening."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import require_service

REPO_ROOT = Path(__file__).resolve().parents[1]
SANDBOX_IMAGE = "simple-sandbox:latest"

PROBE = """
import json, os
status = dict(line.split(':', 1) for line in open('/proc/self/status') if ':' in line)
def writable(path):
    try:
        with open(os.path.join(path, 'probe'), 'w') as f:
            f.write('x')
        return True
    except OSError:
        return False
print(json.dumps({
    'uid': os.getuid(), 'gid': os.getgid(), 'cwd': os.getcwd(),
    'root_writable': writable('/'), 'work_writable': writable('/work'),
    'tmp_writable': writable('/tmp'),
    'cap_eff': status['CapEff'].strip(), 'no_new_privs': status['NoNewPrivs'].strip(),
    'sandbox_id': os.environ.get('SIMPLE_SANDBOX_ID'),
}))
"""


def connect_docker() -> Any:
    """A client of the real engine; require_service (fails in CI) when there is none."""
    try:
        from docker.client import DockerClient
    except ImportError as e:
        require_service("Docker", f"the docker package is not installed ({e})")
    try:
        client = DockerClient.from_env(timeout=30)
        client.ping()
    except Exception as e:
        require_service("the Docker engine", str(e))
    return client


def ensure_sandbox_image(client: Any) -> str:
    """simple-sandbox:latest, built with docker/build-images.sh when missing (slow once)."""
    from docker.errors import ImageNotFound

    try:
        client.images.get(SANDBOX_IMAGE)
    except ImageNotFound:
        subprocess.run(
            ["bash", str(REPO_ROOT / "docker" / "build-images.sh"), "sandbox"],
            cwd=REPO_ROOT,
            check=True,
            timeout=1200,
        )
    return SANDBOX_IMAGE
