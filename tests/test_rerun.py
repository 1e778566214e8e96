"""Rerun what failed, end to end on the process backend with the real runtime.

A run of 7 templates of which 2 exit 1: `simplectl rerun` starts exactly those 2 in a
new run linked to the original (`rerun_of`), and its report (JSON, Markdown, JUnit)
names the original. A batch run: only the items without a passing result run again.
A run still going is 409; a run where nothing failed is 409 (`--all` reruns it whole);
the budget is checked as for any run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import httpx
import pytest
from typer.testing import CliRunner

from controller.cli.embedded import EmbeddedServer
from controller.cli.main import app
from controller.settings import Settings
from tests.e2e_helpers import cancel_active_runs, report, start_run, wait_run

FAST = {"agents": 1, "steps": 1, "llm_latency_ms": 0, "checkpoint_interval_s": 0}


def template(template_id: str, **config: Any) -> dict[str, Any]:
    return {"id": template_id, "category": "test", "timeout_s": 120,
            "estimate": {"cost_usd": [0.5, 1.0], "runtime_s": [0.1, 1]},
            "config": {**FAST, **config}}


TEMPLATES = [
    *(template(f"ok_{n}") for n in range(1, 6)),
    template("bad_1", exit_code=1),
    template("bad_2", exit_code=1),
    template("sleeper", sleep_s=60),
    {**template("evals"), "batch_size": 2, "estimate": {"cost_usd": [0.0, 0.01],
                                                       "runtime_s": [0.1, 0.5]},
     "items": [{"item_id": "a", "data": {"n": 1}},
               {"item_id": "b", "data": {"expect": False, "reason": "b is wrong"}},
               {"item_id": "c", "data": {"raise": "c blew up"}},
               {"item_id": "d", "data": {"n": 4}}]},
]
SEVEN = [f"ok_{n}" for n in range(1, 6)] + ["bad_1", "bad_2"]


@pytest.fixture
def server(settings: Settings, catalog_dir: Callable[..., Path]) -> Iterator[EmbeddedServer]:
    catalog = catalog_dir(json.dumps({"templates": TEMPLATES}))
    with EmbeddedServer(settings.model_copy(update={"catalog_dirs": [catalog]})) as served:
        yield served
        with httpx.Client(base_url=served.url, timeout=30) as client:
            cancel_active_runs(client)


def ended(server: EmbeddedServer, body: dict[str, Any]) -> dict[str, Any]:
    return wait_run(server.url, start_run(server.url, body), 120)


def test_rerun_starts_exactly_the_two_that_failed_linked_to_the_original(
    server: EmbeddedServer
) -> None:
    original = ended(server, {"templates": SEVEN, "max_parallel": 7})
    assert original["status"] == "failed"
    failed = sorted(s["sandbox_id"] for s in original["sandboxes"] if s["status"] == "failed")
    assert len(failed) == 2 and original["sandbox_counts"] == {"succeeded": 5, "failed": 2}

    cli = CliRunner().invoke(app, ["rerun", original["run_id"], "--failed", "--wait",
                                   "--json", "--server", server.url])
    assert cli.exit_code == 1, cli.output  # they fail again: the new run failed
    new = json.loads(cli.stdout)
    run = httpx.get(f"{server.url}/v1/runs/{new['run_id']}").json()
    assert run["rerun_of"] == original["run_id"]
    assert sorted(s["template_id"] for s in run["sandboxes"]) == ["bad_1", "bad_2"]
    assert run["sandboxes_total"] == 2 and all(s["attempts"] >= 1 for s in run["sandboxes"])
    assert run["request"]["rerun"] == {"of": original["run_id"], "scope": "failed",
                                       "sandboxes": failed, "items": 0}
    assert run["plan"]["budget_usd"] is None and run["plan"]["max_parallel"] == 2
    assert new["rerun_of"] == original["run_id"]
    markdown = httpx.get(f"{server.url}/v1/runs/{new['run_id']}/report?format=markdown").text
    assert f"Rerun of `{original['run_id']}`" in markdown
    junit = ET.fromstring(
        httpx.get(f"{server.url}/v1/runs/{new['run_id']}/report?format=junit").text)
    assert junit.find(".//property[@name='rerun_of']").get("value") == original["run_id"]
    assert report(server.url, original["run_id"])["rerun_of"] is None  # the original is as it was

    # The budget is checked as for any run: 0.5 USD cannot hold a 1 USD template.
    poor = httpx.post(f"{server.url}/v1/runs/{original['run_id']}/rerun",
                      json={"budget_usd": 0.5})
    assert poor.status_code == 422, poor.text
    assert "budget" in poor.json()["error"]["message"]


def test_a_batch_rerun_runs_only_the_items_without_a_passing_result(
    server: EmbeddedServer
) -> None:
    original = ended(server, {"templates": ["evals"]})
    assert original["sandboxes_total"] == 2  # {a, b} and {c, d}
    answer = httpx.post(f"{server.url}/v1/runs/{original['run_id']}/rerun", timeout=30)
    assert answer.status_code == 201, answer.text
    rerun = wait_run(server.url, answer.json()["run_id"], 120)
    assert rerun["rerun_of"] == original["run_id"] and rerun["sandboxes_total"] == 1
    items = httpx.get(f"{server.url}/v1/runs/{rerun['run_id']}/items").json()["items"]
    assert {i["item_id"]: i["outcome"] for i in items} == {"b": "failed", "c": "errored"}
    assert rerun["request"]["rerun"]["items"] == 2


def test_a_run_still_going_or_with_nothing_failed_is_refused_clearly(
    server: EmbeddedServer
) -> None:
    going = start_run(server.url, {"templates": ["sleeper"]})
    refused = httpx.post(f"{server.url}/v1/runs/{going}/rerun", json={"scope": "failed"})
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert f"run {going} is still " in error["message"] and "ended" in error["message"]
    assert f"simplectl cancel {going}" in error["hint"]
    httpx.post(f"{server.url}/v1/runs/{going}/cancel")
    wait_run(server.url, going, 60)

    fine = ended(server, {"templates": ["ok_1", "ok_2"]})
    assert fine["status"] == "succeeded"
    nothing = httpx.post(f"{server.url}/v1/runs/{fine['run_id']}/rerun")
    assert nothing.status_code == 409
    assert "has nothing to rerun" in nothing.json()["error"]["message"]
    assert "--all" in nothing.json()["error"]["hint"]
    cli = CliRunner().invoke(app, ["rerun", fine["run_id"], "--server", server.url])
    assert cli.exit_code == 2 and "nothing to rerun" in cli.output

    everything = CliRunner().invoke(app, ["rerun", fine["run_id"], "--all",
                                          "--server", server.url])
    assert everything.exit_code == 0, everything.output
    again = wait_run(server.url, everything.stdout.strip(), 60)
    assert sorted(s["template_id"] for s in again["sandboxes"]) == ["ok_1", "ok_2"]
    assert again["rerun_of"] == fine["run_id"] and again["status"] == "succeeded"
    missing = httpx.post(f"{server.url}/v1/runs/run-00000000/rerun")
    assert missing.status_code == 404


def test_embedded_simplectl_reruns_and_collects(
    settings: Settings, catalog_dir: Callable[..., Path]
) -> None:
    """Without --server, as a user types it: `run`, then `rerun` (which follows the new
    run, embedded), then `gc --dry-run` on the same data directory."""
    import os
    import subprocess
    import sys

    catalog = catalog_dir(json.dumps({"templates": TEMPLATES}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    env.update(SIMPLE_DATA_DIR=str(settings.data_dir),
               SIMPLE_DATABASE_URL=settings.resolved_database_url,
               SIMPLE_CATALOG_DIRS=str(catalog), SIMPLE_PROCESS_USER="self")

    def simplectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "controller.cli", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    first = simplectl("run", "ok_1", "bad_1", "--json")
    assert first.returncode == 1, first.stderr
    original = json.loads(first.stdout)["run_id"]
    again = simplectl("rerun", original, "--json")
    assert again.returncode == 1, again.stderr
    rerun = json.loads(again.stdout)
    assert rerun["rerun_of"] == original
    assert [s["template_id"] for s in rerun["sandboxes"]] == ["bad_1"]
    assert f"rerun of {original} (failed): 1 of its sandboxes\n" in again.stderr
    gc = simplectl("gc", "--dry-run")
    assert gc.returncode == 0, gc.stderr
    assert gc.stdout.startswith("would free 0 store objects (0 bytes) and 0 event rows of 0 runs")
