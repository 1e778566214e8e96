"""Batch templates end to end on the process backend with the real runtime and local store:
one raising item, one failing item and 98 passing in one sandbox; the report, JUnit and
the item table; a retry that re-runs only the items without a result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree as ET

import httpx
import pytest

from controller.cli.embedded import EmbeddedServer
from controller.settings import Settings
from tests.e2e_helpers import report, start_run, wait_run


def hundred_items() -> list[dict[str, object]]:
    """98 passing, item-042 raises, item-077 returns failed with a reason."""
    items: list[dict[str, object]] = [
        {"item_id": f"item-{i:03d}", "data": {"n": i}} for i in range(100)
    ]
    items[42]["data"] = {"raise": "boom at 42"}
    items[77]["data"] = {"expect": False, "reason": "77 is not prime"}
    return items


def batch_catalog(write: Callable[..., Path], items_file: bool = True,
                  config: dict[str, object] | None = None, batch_size: int = 100) -> Path:
    directory = write(
        "templates:\n"
        "  - id: evals\n"
        "    category: test\n"
        "    estimate: {cost_usd: [0.0, 0.01], runtime_s: [0.1, 0.2]}\n"
        "    timeout_s: 120\n"
        + ("    items_file: evals.jsonl\n" if items_file else "")
        + f"    batch_size: {batch_size}\n"
        + f"    config: {json.dumps({'checkpoint_interval_s': 0, **(config or {})})}\n"
    )
    (directory / "evals.jsonl").write_text(
        "".join(json.dumps(i) + "\n" for i in hundred_items())
    )
    return directory


def serve(settings: Settings, catalog: Path) -> EmbeddedServer:
    return EmbeddedServer(settings.model_copy(update={"catalog_dirs": [catalog]}))


def test_one_sandbox_runs_100_items_and_reports_each(
    settings: Settings, catalog_dir: Callable[..., Path]
) -> None:
    with serve(settings, batch_catalog(catalog_dir)) as server:
        plan = httpx.post(f"{server.url}/v1/plans", json={"templates": ["evals"]},
                          timeout=30).json()
        run_id = start_run(server.url, {"templates": ["evals"]})
        run = wait_run(server.url, run_id, 120)
        result = report(server.url, run_id)
        junit = httpx.get(f"{server.url}/v1/runs/{run_id}/report?format=junit", timeout=30)
        markdown = httpx.get(f"{server.url}/v1/runs/{run_id}/report?format=markdown",
                             timeout=30).text
        errored = httpx.get(f"{server.url}/v1/runs/{run_id}/items?outcome=errored",
                            timeout=30).json()
        pages, after = [], None
        while True:
            query = "limit=30" + (f"&after={after}" if after else "")
            page = httpx.get(f"{server.url}/v1/runs/{run_id}/items?{query}", timeout=30).json()
            pages.append(page["items"])
            if not (after := page["next_after"]):
                break
    assert plan["batches"] == [{"template_id": "evals", "items": 100, "batch_size": 100,
                                "sandboxes": 1, "items_per_sandbox": [100, 100]}]
    assert [s["status"] for s in run["sandboxes"]] == ["succeeded"], run["sandboxes"]
    assert run["status"] == "succeeded"
    row = result["sandboxes"][0]
    assert row["items"] == {"total": 100, "passed": 98, "failed": 1, "errored": 1}
    assert result["totals"]["items"] == row["items"]
    assert row["steps_recorded"] == 100
    assert [i["item_id"] for i in errored["items"]] == ["item-042"]
    assert "boom at 42" in errored["items"][0]["error"]
    assert [len(p) for p in pages] == [30, 30, 30, 10]
    everything = {i["item_id"]: i for p in pages for i in p}
    assert len(everything) == 100
    assert everything["item-077"]["reason"] == "77 is not prime"
    assert everything["item-077"]["outcome"] == "failed"
    cases = ET.fromstring(junit.text).findall(".//testcase")
    assert len(cases) == 100
    assert sum(1 for c in cases if c.find("failure") is not None) == 1
    assert sum(1 for c in cases if c.find("error") is not None) == 1
    assert "98/100 passed, 1 failed, 1 errored" in markdown
    assert "77 is not prime" in markdown and "boom at 42" in markdown


def test_a_batch_retry_runs_only_the_items_without_a_result(
    settings: Settings, catalog_dir: Callable[..., Path]
) -> None:
    config = {"fail_at_step": 60, "fail_attempts": 1, "checkpoint_every_steps": 10}
    with serve(settings, batch_catalog(catalog_dir, config=config)) as server:
        run_id = start_run(server.url, {"templates": ["evals"]})
        run = wait_run(server.url, run_id, 120)
        sandbox_id = run["sandboxes"][0]["sandbox_id"]
        sandbox = httpx.get(f"{server.url}/v1/sandboxes/{sandbox_id}", timeout=30).json()
        stream = httpx.get(f"{server.url}/v1/runs/{run_id}/items?limit=1000", timeout=30)
        result = report(server.url, run_id)
    assert sandbox["status"] == "succeeded" and sandbox["attempts"] == 2, sandbox
    assert [a["resumed_from_step"] for a in sandbox["attempt_history"]] == [None, 59]
    logs = (settings.data_dir / "store").rglob("attempt-2.log")
    assert any("batch: 41 items (59 done before)" in p.read_text() for p in logs)
    assert result["sandboxes"][0]["items"] == {"total": 100, "passed": 98, "failed": 1,
                                               "errored": 1}
    assert result["sandboxes"][0]["steps_recorded"] == 100
    assert len(stream.json()["items"]) == 100


@pytest.mark.once
def test_ad_hoc_items_split_into_batches_and_are_bounded(
    settings: Settings, catalog_dir: Callable[..., Path]
) -> None:
    items = hundred_items()[:25]
    body = {"templates": ["evals"], "items": items, "batch_size": 10}
    with serve(settings, batch_catalog(catalog_dir, items_file=False)) as server:
        plan = httpx.post(f"{server.url}/v1/plans", json=body, timeout=30).json()
        too_many = httpx.post(f"{server.url}/v1/plans", json={**body, "batch_size": 5000},
                              timeout=30)
        repeated = httpx.post(f"{server.url}/v1/runs", json={**body, "items": items + items[:1]},
                              timeout=30)
        run_id = start_run(server.url, body)
        run = wait_run(server.url, run_id, 120)
        result = report(server.url, run_id)
    assert plan["batches"][0]["sandboxes"] == 3
    assert plan["batches"][0]["items_per_sandbox"] == [8, 9]
    assert plan["estimated_cost_usd"] == [0.0, 0.25], "estimates are per item"
    assert too_many.status_code == 422 and "batch_size" in too_many.text
    assert repeated.status_code == 422 and "item-000" in repeated.text
    assert len(run["sandboxes"]) == 3
    assert {s["status"] for s in run["sandboxes"]} == {"succeeded"}
    assert run["request"]["items"]["count"] == 25, "the run keeps a digest, not the items"
    assert result["totals"]["items"] == {"total": 25, "passed": 25, "failed": 0, "errored": 0}


@pytest.mark.once
def test_an_entrypoint_is_called_per_item(
    settings: Settings, catalog_dir: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    directory = catalog_dir(json.dumps({"templates": [{
        "id": "numbers", "category": "test", "timeout_s": 60, "batch_size": 10,
        "estimate": {"cost_usd": [0, 0], "runtime_s": [1, 1]},
        "entrypoint": "tests.fixtures.item_checks:check",
        "items": [{"item_id": f"n{n}", "data": {"n": n}} for n in range(10, 20)]}]}))
    with serve(settings, directory) as server:
        run_id = start_run(server.url, {"templates": ["numbers"]})
        run = wait_run(server.url, run_id, 60)
        errored = httpx.get(f"{server.url}/v1/runs/{run_id}/items?outcome=errored",
                            timeout=30).json()["items"]
        result = report(server.url, run_id)
    assert run["status"] == "succeeded", run["sandboxes"]
    assert result["totals"]["items"] == {"total": 10, "passed": 5, "failed": 4, "errored": 1}
    assert [(i["item_id"], i["error"]) for i in errored] == [("n13", "ValueError: unlucky")]
