"""The run page is answered by pydantic in one step, its plan serialized once per run
(controller.api.rendered): the answer is exactly the RunPublic model's JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, insert

from controller.api import rendered
from controller.api.responses import RunPublic
from controller.db import plans as plans_module
from controller.db.schema import runs, sandboxes
from controller.runs import get_run

PLAN = {
    "selected": ["t1", "t2"],
    "excluded": [{"template_id": "t3", "reason": "over budget"}],
    "estimated_cost_usd": [0.1, 0.2],
    "estimated_runtime_s": [1.0, 2.0],
    "max_parallel": 2,
    "priority": "speed",
    "budget_usd": None,
    "a_key_of_a_later_version": {"kept": True},
}


def _add_run(engine: Engine, run_id: str) -> None:
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(insert(runs).values(
            id=run_id, status="running", backend="process", request={"suites": ["x"]},
            plan=PLAN, max_parallel=2, cancel_requested=False, created_at=now, started_at=now,
        ))  # fmt: skip
        conn.execute(insert(sandboxes), [
            {"id": f"{run_id}-{t}", "run_id": run_id, "template_id": t, "position": i,
             "status": "running" if i == 0 else "pending", "spec": {"timeout_s": 60},
             "attempt": i, "launched_at": now if i == 0 else None, "last_seq": 0,
             "cost_usd": 0.25, "prior_cost_usd": 0.0, "tokens": 7, "aggregated": False,
             "expensive": False}
            for i, t in enumerate(("t1", "t2"))
        ])  # fmt: skip


def _answer(engine: Engine, run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    page = get_run(engine, run_id)
    body = rendered.run_response(engine, page).body
    expected = json.loads(RunPublic.model_validate(page).model_dump_json())
    return json.loads(body), expected


def test_the_answer_is_the_models_json(engine: Engine) -> None:
    _add_run(engine, "run-a")
    got, expected = _answer(engine, "run-a")
    assert got == expected
    assert got["plan"]["a_key_of_a_later_version"] == {"kept": True}
    assert [s["status"] for s in got["sandboxes"]] == ["running", "pending"]
    assert got["sandbox_counts"] == {"running": 1, "pending": 1}


def test_a_plan_is_rendered_once_per_run(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered_plans: list[Any] = []
    render = rendered._render_plan

    def counting(plan: Any) -> bytes:
        rendered_plans.append(plan)
        return render(plan)

    monkeypatch.setattr(rendered, "_render_plan", counting)
    monkeypatch.setattr(plans_module, "PLANS_KEPT", 1)
    _add_run(engine, "run-a")
    _add_run(engine, "run-b")
    for run_id in ("run-a", "run-a", "run-b", "run-b", "run-a"):
        got, expected = _answer(engine, run_id)
        assert got == expected
    # a, b (a dropped: one kept), a again
    assert len(rendered_plans) == 3
