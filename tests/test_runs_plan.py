"""A run's sandboxes are what its plan decided: the batches, their items, the expensive
flags and the stages are read from the plan, never worked out a second time."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from controller.catalog.batches import check_items
from controller.catalog.stages import Policy, PolicyKind, Stage
from controller.catalog.templates import Catalog
from controller.db.schema import runs, sandboxes
from controller.planning.model import PlanRequest, Priority
from controller.runs import create_run
from controller.store.base import items_key
from controller.store.local import LocalStore
from tests.test_planner import make_catalog, make_template


def items(count: int) -> tuple[Any, ...]:
    return check_items([{"item_id": f"i{n}", "data": n} for n in range(count)], "test")


def mixed_catalog() -> Catalog:
    # batchy: at most $0.5 per item. With 30 items in batches of 10 the template may cost
    # $15 (expensive: at least $10) while each batch may cost $5.
    return make_catalog(make_template("batchy", (0.1, 0.5), (2, 4)),
                        make_template("cheap", (1, 2), (10, 20)),
                        make_template("pricey", (10, 30), (10, 20)))


def launched(engine: Engine, run_id: str) -> tuple[dict[str, Any], list[Any]]:
    with engine.connect() as conn:
        plan = conn.execute(select(runs.c.plan).where(runs.c.id == run_id)).scalar_one()
        rows = conn.execute(
            select(sandboxes).where(sandboxes.c.run_id == run_id).order_by(sandboxes.c.position)
        ).all()
    return plan, rows


def start(engine: Engine, tmp_path: Path, request: PlanRequest,
          catalog: Catalog | None = None) -> tuple[str, LocalStore]:
    store = LocalStore(tmp_path / "store")
    run_id, created = create_run(engine, catalog or mixed_catalog(), request, {"test": True},
                                 backend="process", default_image="x", store=store)
    assert created
    return run_id, store


@pytest.mark.parametrize("priority", list(Priority))
def test_launched_sandboxes_have_the_plans_expensive_flags_and_batches(
    engine: Engine, tmp_path: Path, priority: Priority
) -> None:
    request = PlanRequest(templates=("batchy",), items=items(30), batch_size=10,
                          priority=priority)
    run_id, _ = start(engine, tmp_path, request)
    plan, rows = launched(engine, run_id)
    assert plan["expensive"] == ["batchy"]
    [batches] = plan["batches"]
    assert [r.template_id for r in rows] == ["batchy"] * batches["sandboxes"] == ["batchy"] * 3
    assert [r.spec["items"]["count"] for r in rows] == [10, 10, 10]
    assert [r.spec["items"]["batch"] for r in rows] == [1, 2, 3]
    # Each batch may cost $5, but the plan counted the template as expensive: so are they.
    assert [r.expensive for r in rows] == [True, True, True]


def test_a_mixed_run_flags_each_sandbox_as_the_plan_does(engine: Engine, tmp_path: Path) -> None:
    catalog = make_catalog(*mixed_catalog().templates.values(),
                           suites={"all": ("cheap", "pricey")})
    run_id, _ = start(engine, tmp_path, PlanRequest(templates=("cheap", "pricey")), catalog)
    plan, rows = launched(engine, run_id)
    assert [r.template_id for r in rows] == plan["selected"] == ["cheap", "pricey"]
    assert {r.template_id for r in rows if r.expensive} == set(plan["expensive"]) == {"pricey"}
    assert plan["max_parallel_expensive"] == 1
    assert all(r.stage == 0 and r.spec.get("items") is None for r in rows)


def test_a_run_with_a_query_and_items_launches_the_planned_batches(
    engine: Engine, tmp_path: Path
) -> None:
    """The plan and the sandboxes agree on the items (issue 24: the query dropped them)."""
    request = PlanRequest(query="run batchy", items=items(25), batch_size=10)
    run_id, store = start(engine, tmp_path, request)
    plan, rows = launched(engine, run_id)
    [batches] = plan["batches"]
    assert (batches["items"], batches["sandboxes"]) == (25, 3)
    assert plan["estimated_cost_usd"] == [pytest.approx(2.5), pytest.approx(12.5)]
    assert [r.spec["items"]["count"] for r in rows] == [9, 8, 8]
    stored = [json.loads(line)["item_id"] for r in rows
              for line in store.get(items_key(run_id, r.id)).decode().splitlines()]
    assert stored == [f"i{n}" for n in range(25)]


def test_a_staged_run_launches_the_plans_stages_and_batches(
    engine: Engine, tmp_path: Path
) -> None:
    """A staged plan lists its batch templates' batches too (it used to leave them out)."""
    with_items = replace(make_template("listed", (0.1, 0.2), (1, 2)), items=items(12),
                         batch_size=5)
    catalog = make_catalog(with_items, *mixed_catalog().templates.values())
    stages = (Stage(("cheap", "listed"), Policy(PolicyKind.ALL)),
              Stage(("pricey",), Policy(PolicyKind.ALL)))
    run_id, _ = start(engine, tmp_path, PlanRequest(stages=stages), catalog)
    plan, rows = launched(engine, run_id)
    assert plan["batches"] == [{"template_id": "listed", "items": 12, "batch_size": 5,
                                "sandboxes": 3, "items_per_sandbox": [4, 4]}]
    stage_of = {t: s["index"] for s in plan["stages"] for t in s["templates"]}
    assert [(r.template_id, r.stage) for r in rows] == [
        (t, stage_of[t]) for t in plan["selected"] for _ in range(3 if t == "listed" else 1)]
    assert [r.spec["items"]["count"] for r in rows if r.template_id == "listed"] == [4, 4, 4]
    assert {r.stage for r in rows} == {0, 1}
    assert {r.template_id for r in rows if r.expensive} == set(plan["expensive"]) == {"pricey"}
