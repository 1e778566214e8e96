"""A sandbox written only from docs/architecture.md's contract (plain urllib) runs as a template.

Its events, replays, changed replays, bad and missing tokens, another sandbox's id,
malformed events, its snapshot and its failure are answered as the contract says.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.cli.embedded import EmbeddedServer
from controller.settings import Settings
from tests.e2e_helpers import logs, report, start_run, wait_run

PROGRAM = Path(__file__).parent / "fixtures" / "contract_sandbox.py"


def _template(template_id: str, config: dict[str, object]) -> str:
    return f"""
  - id: {template_id}
    category: contract
    estimate: {{cost_usd: [0.1, 0.5], runtime_s: [1, 2]}}
    timeout_s: 60
    command: [{sys.executable}, {PROGRAM}]
    config: {json.dumps(config)}
"""


@pytest.fixture
def contract_catalog(catalog_dir: Callable[[str], Path]) -> Path:
    templates = "".join(
        [
            _template("contract_probe", {"mode": "probe", "peer_template": "contract_peer"}),
            _template("contract_peer", {"mode": "probe", "peer_template": "contract_probe"}),
            _template("contract_fail", {"mode": "fail"}),
            _template("contract_not_sqlite", {"mode": "not_sqlite"}),
            _template("contract_bad_schema", {"mode": "bad_schema"}),
            _template("contract_oversize", {"mode": "oversize"}),
        ]
    )
    return catalog_dir("templates:" + templates)


def _answers(url: str, sandbox_id: str) -> dict[str, list[object]]:
    text = logs(url, sandbox_id)
    line = next(x for x in text.splitlines() if x.startswith("ANSWERS "))
    return dict(json.loads(line.removeprefix("ANSWERS ")))


def test_contract_only_sandbox_is_answered_as_the_contract_says(
    settings: Settings, contract_catalog: Path
) -> None:
    settings = settings.model_copy(update={"catalog_dirs": [contract_catalog]})
    with EmbeddedServer(settings) as server:
        run_id = start_run(
            server.url, {"templates": ["contract_probe", "contract_peer"], "max_parallel": 2}
        )
        run = wait_run(server.url, run_id)
        result = report(server.url, run_id)
        probe = next(s for s in run["sandboxes"] if s["template_id"] == "contract_probe")
        answers = _answers(server.url, probe["sandbox_id"])

    first_status, first_body = answers["first"]
    assert first_status == 200
    assert answers["replay"] == [200, first_body], "a replay gets the same answer"
    assert answers["changed_replay"][0] == 409
    assert answers["bad_token"][0] == 401
    assert answers["missing_token"][0] == 401
    assert answers["other_sandbox"][0] == 403
    status, body = answers["malformed"]
    assert status == 422 and "type" in json.loads(str(body))["error"]["field"]
    status, body = answers["no_seq"]
    assert status == 422 and "seq" in json.loads(str(body))["error"]["field"]
    assert answers["progress"][0] == 200

    assert run["status"] == "succeeded"
    assert probe["cost_usd"] == pytest.approx(1.25), "progress shows on the sandbox"
    assert probe["step"] == 1 and probe["steps_total"] == 1
    row = next(s for s in result["sandboxes"] if s["template_id"] == "contract_probe")
    assert row["cost_usd"] == pytest.approx(1.25) and row["error"] is None
    assert result["totals"]["cost_usd"] == pytest.approx(2.5)
    assert result["totals"]["tokens_used"] == 600
    assert result["totals"]["mechanisms_covered"] == ["M2", "M4"]


def test_failure_and_rejected_snapshots(settings: Settings, contract_catalog: Path) -> None:
    settings = settings.model_copy(
        update={
            "catalog_dirs": [contract_catalog],
            "snapshot_max_bytes": 200_000,
            "max_attempts": 1,
        }
    )
    names = ["contract_fail", "contract_not_sqlite", "contract_bad_schema", "contract_oversize"]
    with EmbeddedServer(settings) as server:
        run_id = start_run(server.url, {"templates": names, "max_parallel": 4})
        run = wait_run(server.url, run_id)
        result = report(server.url, run_id)
        oversize_log = logs(
            server.url,
            next(
                s["sandbox_id"] for s in run["sandboxes"] if s["template_id"] == "contract_oversize"
            ),
        )

    rows = {s["template_id"]: s for s in result["sandboxes"]}
    assert run["status"] == "failed"
    failed = rows["contract_fail"]
    assert failed["status"] == "failed" and failed["exit_code"] == 3
    assert "ProbeError: told to fail" in failed["error"]
    assert "not an SQLite 3 file" in rows["contract_not_sqlite"]["error"]
    assert (
        "no `steps` table" in rows["contract_bad_schema"]["error"]
        or "lacks columns" in rows["contract_bad_schema"]["error"]
    )
    assert "SNAPSHOT 413" in oversize_log
    assert "no snapshot was uploaded" in rows["contract_oversize"]["error"]
    for name in names:
        assert rows[name]["cost_usd"] is None, f"{name} loaded nothing"
    assert result["totals"]["cost_usd"] == 0
    assert result["totals"]["tokens_used"] == 0
