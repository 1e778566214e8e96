"""Issue 17, finding 5: "loopback only" trusted every local process, sandboxes included.

The embedded `simplectl run` served its API without a token and handed its URL to the
sandboxes; a sandbox could list runs (200) and start a new run (201). Now the embedded
controller mints a token for its own session: from inside a sandbox every API route
answers 401, with no token and with the sandbox's own token, while the sandbox's own
events are still accepted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

PROBE = Path(__file__).resolve().parents[1] / "fixtures" / "address_probe.py"
REPO_ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 300


def test_a_sandbox_of_an_embedded_run_cannot_use_the_api(
    tmp_path: Path, catalog_dir: Callable[[str], Path]
) -> None:
    out = tmp_path / "answers.json"
    catalog = catalog_dir(
        f"""
        templates:
          - id: address_probe
            category: security
            estimate: {{cost_usd: [0.1, 0.2], runtime_s: [1, 2]}}
            timeout_s: 120
            command: [{sys.executable}, {PROBE}]
            config: {{out: {json.dumps(str(out))}}}
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    env["SIMPLE_DATA_DIR"] = str(tmp_path / "data")
    env["SIMPLE_PROCESS_USER"] = "self"  # its sandbox writes into tmp_path (tests/conftest.py)
    if os.environ.get("SIMPLE_TEST_DATABASE_URL"):
        env["SIMPLE_DATABASE_URL"] = f"sqlite:///{tmp_path / 'simple.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "controller.cli", "run", "address_probe", "--catalog",
         str(catalog), "--backend", "process", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert out.exists(), f"the probe did not run:\n{done.stdout}\n{done.stderr}"
    answers = json.loads(out.read_text().removeprefix("ANSWERS "))

    assert answers["own_events"] == 200, answers
    for route in ("list_runs", "list_runs_sandbox_token", "start_run",
                  "start_run_sandbox_token", "templates", "own_sandbox_detail"):
        assert answers[route] == 401, (route, answers)
    # the run the sandbox tried to start does not exist: only the probe's run is there
    report = json.loads(done.stdout)
    assert [s["template_id"] for s in report["sandboxes"]] == ["address_probe"]
