"""The bench scripts share one support module and run as `python -m bench.<name>`."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from bench.support import noop_template, write_catalog
from controller.catalog.templates import load_catalog

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(p.stem for p in BENCH.glob("*.py") if p.stem not in ("__init__", "support"))
SHARED = {
    node.name
    for node in ast.parse((BENCH / "support.py").read_text()).body
    if isinstance(node, ast.FunctionDef)
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_bench_starts_as_a_module(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", "--help"],
        cwd=BENCH.parent, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout


@pytest.mark.parametrize("name", SCRIPTS)
def test_no_bench_writes_a_shared_helper_again(name: str) -> None:
    tree = ast.parse((BENCH / f"{name}.py").read_text())
    own = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert not own & SHARED, f"bench/{name}.py defines {own & SHARED}: use bench.support"
    source = (BENCH / f"{name}.py").read_text()
    assert "sys.path.insert" not in source, f"bench/{name}.py edits sys.path"


def test_the_support_catalog_loads(tmp_path: Path) -> None:
    templates = [noop_template(f"noop_{i}", "bench_noop") for i in range(3)]
    ids = write_catalog(tmp_path / "c", templates, suites={"all3": ["noop_0", "noop_1", "noop_2"]},
                        items=[{"item_id": "a", "data": {}}])
    catalog = load_catalog([tmp_path / "c"])
    assert ids == ["noop_0", "noop_1", "noop_2"]
    assert list(catalog.suite("all3")) == ids
    assert (tmp_path / "c" / "items.jsonl").read_text().count("\n") == 1
