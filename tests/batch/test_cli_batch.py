"""`simplectl run TEMPLATE --items FILE --batch-size N`: dry-run shows the split, a full
embedded run reports the items, a bad items file exits 2 naming the line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.settings import Settings
from tests.test_cli import _run

CATALOG = """
    templates:
      - id: evals
        category: test
        estimate: {cost_usd: [0.0, 0.01], runtime_s: [0.1, 0.2]}
        timeout_s: 60
"""


@pytest.fixture
def items_file(tmp_path: Path) -> Path:
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps({"item_id": f"i{n}", "data": {"expect": n != 3}}) + "\n"
                            for n in range(7)))
    return path


def test_dry_run_shows_one_sandbox_per_batch(
    settings: Settings, catalog_dir: Callable[[str], Path], items_file: Path
) -> None:
    result = _run(settings, "run", "evals", "--catalog", str(catalog_dir(CATALOG)), "--items",
                  str(items_file), "--batch-size", "3", "--dry-run", "-o", "json")
    assert result.returncode == 0, result.stderr
    rendered = json.loads(result.stdout)
    assert rendered["plan"]["batches"][0]["sandboxes"] == 3
    assert [o["sandbox_id"].rsplit("-", 1)[1] for o in rendered["objects"]] == ["b1", "b2", "b3"]
    assert all("SIMPLE_ITEMS_URL" in o["env"] for o in rendered["objects"])


@pytest.mark.once
def test_run_with_items_reports_them(
    settings: Settings, catalog_dir: Callable[[str], Path], items_file: Path
) -> None:
    result = _run(settings, "run", "evals", "--catalog", str(catalog_dir(CATALOG)), "--items",
                  str(items_file), "--batch-size", "4", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["sandboxes"]) == 2
    assert report["totals"]["items"] == {"total": 7, "passed": 6, "failed": 1, "errored": 0}


def test_a_bad_items_file_exits_2_naming_the_line(
    settings: Settings, catalog_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"item_id": "a"}\n{not json\n')
    result = _run(settings, "run", "evals", "--catalog", str(catalog_dir(CATALOG)), "--items",
                  str(bad))
    assert result.returncode == 2
    assert "line 2 is not JSON" in result.stderr
