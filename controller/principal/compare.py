"""A run against the previous run of the same request: status, cost, time, what changed.

"The same request" is the same set of templates: two runs that ran exactly those are
comparable, whoever asked for them and however they were worded. Only finished
sandboxes count as fixed or newly failing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select

from controller.db.schema import runs
from controller.principal.history import Answer
from controller.runs import get_run
from controller.states import FAILED_SANDBOX

LOOKBACK = 200  # earlier runs searched for one of the same request


def compare_runs(engine: Engine, run_id: str) -> Answer:
    """`run_id` against the latest earlier run that selected the same templates."""
    run = get_run(engine, run_id)
    earlier = _previous_same(engine, run)
    if earlier is None:
        return Answer(f"{run_id} has no earlier run of the same request (the same "
                      f"{len(run['plan']['selected'])} templates) to compare with.",
                      {"run_id": run_id, "previous": None, "runs": [run_id]}, run_id)
    before = get_run(engine, earlier)
    now_cost, then_cost = _cost(run), _cost(before)
    changes = _changes(before, run)
    lines = [
        f"{run_id} ({run['status']}) against {earlier} ({before['status']}), the previous run "
        f"of the same {len(run['plan']['selected'])} templates:",
        f"- cost ${now_cost:,.2f} against ${then_cost:,.2f} ({_delta(now_cost - then_cost)})",
        f"- failed {_failed(run)} against {_failed(before)}",
        f"- took {_took(run)} against {_took(before)}",
    ]
    for label, ids in changes.items():
        if ids:
            lines.append(f"- {label}: {', '.join(ids[:8])}" + (" ..." if len(ids) > 8 else ""))
    return Answer("\n".join(lines), {
        "run_id": run_id, "previous": earlier, "cost_usd": [now_cost, then_cost],
        "failed": [_failed(run), _failed(before)], "changes": changes,
        "runs": [run_id, earlier]}, run_id)


def _previous_same(engine: Engine, run: dict[str, Any]) -> str | None:
    wanted = sorted(run["plan"]["selected"])
    with engine.connect() as conn:
        created = conn.execute(select(runs.c.created_at).where(runs.c.id == run["run_id"])
                               ).scalar()
        rows = conn.execute(select(runs.c.id, runs.c.plan).where(runs.c.created_at < created)
                            .order_by(runs.c.created_at.desc()).limit(LOOKBACK)).all()
    return next((str(r.id) for r in rows if sorted((r.plan or {}).get("selected", [])) ==
                 wanted), None)


def _changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[str]]:
    then = {s["template_id"]: s["status"] for s in before["sandboxes"]}
    now = {s["template_id"]: s["status"] for s in after["sandboxes"]}
    return {
        "newly failing": sorted(t for t, s in now.items() if s in FAILED_SANDBOX
                                and then.get(t) == "succeeded"),
        "fixed": sorted(t for t, s in now.items() if s == "succeeded"
                        and then.get(t) in FAILED_SANDBOX),
    }


def _cost(run: dict[str, Any]) -> float:
    return round(sum(s["cost_usd"] for s in run["sandboxes"]), 2)


def _failed(run: dict[str, Any]) -> int:
    return sum(1 for s in run["sandboxes"] if s["status"] in FAILED_SANDBOX)


def _took(run: dict[str, Any]) -> str:
    if not (run["started_at"] and run["finished_at"]):
        return "still going" if run["started_at"] else "not started"
    seconds = (datetime.fromisoformat(run["finished_at"])
               - datetime.fromisoformat(run["started_at"])).total_seconds()
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _delta(value: float) -> str:
    return f"{'+' if value >= 0 else '-'}${abs(value):,.2f}"
