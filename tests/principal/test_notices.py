"""Proactive notices computed from the database: slow, over the cost estimate, repeated errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, insert, update

from controller.catalog.templates import Catalog
from controller.db.schema import events, sandboxes
from controller.planning.model import PlanRequest
from controller.principal.notices import run_notices
from controller.runs import create_run, get_run


def _run(engine: Engine, catalog: Catalog) -> tuple[str, list[str]]:
    run_id, _ = create_run(engine, catalog, PlanRequest(templates=("board_meeting", "kami_shrine",
                                                                   "jefferson_dinner")),
                           {"t": 1}, backend="process", default_image="x")
    return run_id, [s["sandbox_id"] for s in get_run(engine, run_id)["sandboxes"]]


def test_each_kind_of_notice(engine: Engine, builtin: Catalog) -> None:
    run_id, (slow, costly, erring) = _run(engine, builtin)
    now = datetime.now(UTC)
    max_runtime = builtin.templates["board_meeting"].runtime_s[1]
    with engine.begin() as conn:
        conn.execute(update(sandboxes).where(sandboxes.c.id == slow).values(
            status="running", started_at=now - timedelta(seconds=1.6 * max_runtime)))
        conn.execute(update(sandboxes).where(sandboxes.c.id == costly).values(
            status="running", started_at=now, cost_usd=3.0, prior_cost_usd=2.0))
        conn.execute(insert(events), [
            {"sandbox_id": erring, "run_id": run_id, "event_id": f"e{i}", "attempt": 1,
             "seq": i, "type": "error", "time": now, "data": {}, "body_hash": "x",
             "received_at": now}
            for i in range(1, 4)
        ])
    found = {n["key"]: n for n in run_notices(engine, builtin, run_id, now)}
    assert set(found) == {f"slow:{slow}", f"cost:{costly}", f"errors:{erring}"}
    assert "past 1.5x its" in found[f"slow:{slow}"]["message"]
    assert "has cost $5.00, above its $" in found[f"cost:{costly}"]["message"]
    assert "3 error events" in found[f"errors:{erring}"]["message"]


def test_nothing_to_say_about_a_run_going_to_plan(engine: Engine, builtin: Catalog) -> None:
    run_id, (first, *_rest) = _run(engine, builtin)
    now = datetime.now(UTC)
    max_runtime = builtin.templates["board_meeting"].runtime_s[1]
    with engine.begin() as conn:
        conn.execute(update(sandboxes).where(sandboxes.c.id == first).values(
            status="running", started_at=now - timedelta(seconds=1.4 * max_runtime),
            cost_usd=0.9 * builtin.templates["board_meeting"].cost_usd[1]))
    assert run_notices(engine, builtin, run_id, now) == []
