"""Dashboard fixtures: a controller on a migrated database with no reconciler (pages over
seeded rows), and the served controller of tests/ci with the dashboard's own catalog."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.api.app import create_app
from controller.db.engine import upgrade
from controller.service import Controller
from controller.settings import Settings
from tests.ci.conftest import serve, served  # noqa: F401  (fixtures reused here)

XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'
TOKEN = "web-test-token-0123456789"

# Templates of the browser tests: slow ones to cancel, and one whose description and
# error events carry HTML that must render as text.
CATALOG = """
templates:
  - id: web_slow_a
    category: web
    description: sleeps two minutes (to be cancelled)
    estimate: {{cost_usd: [0.1, 0.5], runtime_s: [1, 2]}}
    timeout_s: 300
    config: {{agents: 2, steps: 2, sleep_s: 120}}
  - id: web_slow_b
    category: web
    description: sleeps two minutes (to be cancelled)
    estimate: {{cost_usd: [0.1, 0.5], runtime_s: [1, 2]}}
    timeout_s: 300
    config: {{agents: 2, steps: 2, sleep_s: 120}}
  - id: web_slow_c
    category: web
    description: sleeps two minutes (to be cancelled)
    estimate: {{cost_usd: [0.1, 0.5], runtime_s: [1, 2]}}
    timeout_s: 300
    config: {{agents: 2, steps: 2, sleep_s: 120}}
  - id: web_xss
    category: web
    description: {xss}
    estimate: {{cost_usd: [0.0, 0.1], runtime_s: [1, 2]}}
    timeout_s: 60
    command: [python, {script}]
suites:
  web-slow: [web_slow_a, web_slow_b, web_slow_c]
"""

# A sandbox whose events say what a hostile program might: HTML in every string.
XSS_SCRIPT = """
import json, os, sys, time, urllib.request
payload = {xss}
url = (os.environ["SIMPLE_CONTROLLER_URL"].rstrip("/") + "/v1/sandboxes/"
       + os.environ["SIMPLE_SANDBOX_ID"] + "/events")
def post(*events):
    body = json.dumps({{"events": list(events)}}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={{
        "Authorization": "Bearer " + os.environ["SIMPLE_SANDBOX_TOKEN"],
        "Content-Type": "application/json"}})
    urllib.request.urlopen(request, timeout=10).read()
post({{"id": "x1", "seq": 1, "type": "started", "time": "2026-01-01T00:00:00Z", "data": {{}}}})
time.sleep(4)  # the page is open by now: the next events arrive through the stream
post({{"id": "x2", "seq": 2, "type": "error", "time": "2026-01-01T00:00:01Z",
      "data": {{"error": {{"type": payload, "message": payload, "transient": True}}}}}})
print(payload, flush=True)
post({{"id": "x3", "seq": 3, "type": "failed", "time": "2026-01-01T00:00:02Z",
      "data": {{"error": {{"type": "Hostile", "message": payload, "transient": False}}}}}})
sys.exit(3)
"""


@pytest.fixture
def ci_catalog(tmp_path: Path, catalog_dir: Callable[..., Path]) -> Path:
    """Overrides tests/ci's catalog for `serve`: the dashboard tests' templates."""
    import json

    script = tmp_path / "xss_sandbox.py"
    script.write_text(textwrap.dedent(XSS_SCRIPT.format(xss=json.dumps(XSS))))
    text = CATALOG.format(xss=json.dumps(XSS), script=json.dumps(str(script)))
    return catalog_dir(text, "web.yaml")


@pytest.fixture
def page_controller(
    settings: Settings, ci_catalog: Path
) -> Iterator[Callable[..., tuple[Controller, TestClient]]]:
    """A controller on a migrated database, reconciler not started, and a client of it."""
    made: list[tuple[Controller, TestClient]] = []

    def make(**update: Any) -> tuple[Controller, TestClient]:
        # TestClient's Host is `testserver`: a name the controller answers only when told.
        changed = settings.model_copy(
            update={"catalog_dirs": [ci_catalog], "allowed_hosts": ["testserver"], **update}
        )
        controller = Controller(changed)
        upgrade(controller.engine)
        # https: the session cookie is Secure off loopback (TestClient's server is no IP)
        client = TestClient(create_app(controller, manage_lifecycle=False),
                             base_url="https://testserver")
        made.append((controller, client))
        return controller, client

    yield make
    for controller, client in made:
        client.close()
        controller.close()  # its backend too: nothing of it left in /tmp
