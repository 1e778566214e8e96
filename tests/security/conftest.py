"""Fixtures of the security tests: a served controller whose catalog holds hostile sandboxes.

Each hostile template runs a small standard-library script (written next to the
catalog) that does what the security review did from inside a sandbox. The served
controller is `tests.ci.conftest`'s real `simplectl serve` subprocess.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ci.conftest import CATALOG, GARBLED_SCRIPT, TOKEN_SCRIPT, serve, served  # noqa: F401
from tests.sandbox_python import open_dir, private_python, sandbox_python  # noqa: F401
from tests.security import hostile

HOSTILE_CATALOG = """
  - id: upload_file
    category: hostile
    description: PUTs the file named in its config as its snapshot, then exits 0
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 120
    command: [python, {upload_script}]
  - id: post_events
    category: hostile
    description: POSTs the event batches in its config file, prints each answer, sleeps
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 120
    command: [python, {events_script}]
  - id: post_events_b
    category: hostile
    description: the same script as post_events, for a second sandbox of one run
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 120
    command: [python, {events_script}]
  - id: quiet
    category: hostile
    description: prints one line, then stays quiet for a minute
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 120
    command: [python, {quiet_script}]
  - id: escape_group
    category: hostile
    description: rewrites its process-backend files to point at the controller's process group
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 120
    command: [python, {escape_script}]
  - id: memory_hog
    category: hostile
    resources: {memory: 64Mi}
    description: a grandchild allocates past the memory limit
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 120
    command: [python, {hog_script}]
"""

SCRIPTS = {
    "token_script": TOKEN_SCRIPT,
    "garbled_script": GARBLED_SCRIPT,
    "upload_script": hostile.UPLOAD_SCRIPT,
    "events_script": hostile.EVENTS_SCRIPT,
    "quiet_script": hostile.QUIET_SCRIPT,
    "escape_script": hostile.ESCAPE_SCRIPT,
    "hog_script": hostile.HOG_SCRIPT,
}


@pytest.fixture
def ci_catalog(tmp_path: Path, catalog_dir: Callable[..., Path]) -> Path:
    """The `ci` catalog plus the hostile templates (overrides tests.ci's fixture)."""
    text = CATALOG.replace("suites:", HOSTILE_CATALOG.lstrip("\n") + "suites:", 1)
    for name, source in SCRIPTS.items():
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        text = text.replace("{" + name + "}", json.dumps(str(path)))
    return catalog_dir(text, "ci.yaml")
