"""docs/examples/batch-image/evaluate.py, the documented minimal batch image, really
follows the contract: run as a template's command against the real controller."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.cli.embedded import EmbeddedServer
from controller.settings import Settings
from tests.e2e_helpers import report, start_run, wait_run

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "batch-image"


@pytest.mark.once
def test_the_example_batch_image_reports_each_item(
    settings: Settings, catalog_dir: Callable[..., Path]
) -> None:
    items = [{"item_id": word, "data": {"text": word}} for word in ("racecar", "level", "hello")]
    items.append({"item_id": "no-text", "data": {"words": 2}})
    template = {"id": "palindromes", "category": "test", "timeout_s": 60,
                "estimate": {"cost_usd": [0, 0], "runtime_s": [1, 1]},
                "command": [sys.executable, str(EXAMPLE / "evaluate.py")], "items": items}
    catalog = catalog_dir(json.dumps({"templates": [template]}))
    with EmbeddedServer(settings.model_copy(update={"catalog_dirs": [catalog]})) as server:
        run_id = start_run(server.url, {"templates": ["palindromes"]})
        run = wait_run(server.url, run_id, 60)
        result = report(server.url, run_id)
    assert run["status"] == "succeeded", run["sandboxes"]
    row = result["sandboxes"][0]
    assert row["items"] == {"total": 4, "passed": 2, "failed": 1, "errored": 1}
    assert row["steps_recorded"] == 4 and row["error"] is None
