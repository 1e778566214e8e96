"""What is waiting and why: pending sandboxes, each with the reason the reconciler gives it.

The reasons follow the reconciler's launch rules, in its order: a run held for a
cost confirmation, a cancel in progress, a later stage of a staged run, a retry
backing off after a transient failure, the expensive templates' own limit, every
slot of the run's `max_parallel` taken, else next in launch order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select

from controller.db.schema import runs, sandboxes
from controller.language.questions import Question
from controller.principal.history import Answer, cite
from controller.states import ACTIVE_RUN

SHOWN = 20


def answer_waiting(engine: Engine, question: Question, run_id: str | None) -> Answer:
    """Pending sandboxes of a run (or of every active run), a template's, and why."""
    with engine.connect() as conn:
        query = select(runs).where(runs.c.id == run_id) if run_id else (
            select(runs).where(runs.c.status.in_([s.value for s in ACTIVE_RUN]))
            .order_by(runs.c.created_at))
        found = conn.execute(query).all()
        waiting: list[dict[str, Any]] = []
        for run in found:
            rows = conn.execute(select(sandboxes).where(sandboxes.c.run_id == run.id)
                                .order_by(sandboxes.c.position)).all()
            waiting += _waiting(run, rows, question.templates)
    where = f" in {run_id}" if run_id else ""
    if not waiting:
        what = " of " + ", ".join(question.templates) if question.templates else ""
        return Answer(f"Nothing{what} is waiting{where or ' in the active runs'}"
                      f"{cite(r.id for r in found)}.",
                      {"waiting": [], "runs": [r.id for r in found]}, run_id)
    counts = Counter(w["reason"] for w in waiting)
    lines = [f"{len(waiting)} sandbox(es) waiting{where}:"]
    lines += [f"- {n}: {reason}" for reason, n in counts.most_common()]
    lines += [f"  {w['template_id']} in {w['run_id']}" for w in waiting[:SHOWN]]
    run_ids = list(dict.fromkeys(w["run_id"] for w in waiting))
    return Answer("\n".join(lines) + cite(run_ids), {"waiting": waiting, "runs": run_ids},
                  run_id or (run_ids[0] if len(run_ids) == 1 else None))


def _waiting(run: Any, rows: Sequence[Any], templates: tuple[str, ...]) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    running = [r for r in rows if r.status == "running"]
    expensive_running = sum(1 for r in running if r.expensive)
    found = []
    for row in rows:
        if row.status != "pending" or (templates and row.template_id not in templates):
            continue
        found.append({"run_id": run.id, "template_id": row.template_id,
                      "sandbox_id": row.id, "attempt": row.attempt,
                      "reason": _reason(run, row, len(running), expensive_running, now)})
    return found


def _reason(run: Any, row: Any, running: int, expensive_running: int, now: datetime) -> str:
    limit = (run.plan or {}).get("max_parallel_expensive")
    if run.hold_reason:
        return (f"launching is held for a confirmation ({run.hold_reason}); confirm with "
                f"POST /v1/runs/{run.id}/confirm")
    if run.cancel_requested:
        return "the run is being cancelled: it will be skipped"
    if (run.plan or {}).get("stages") and row.stage > (run.stage or 0):
        return f"stage {row.stage + 1} waits for stage {(run.stage or 0) + 1} to finish"
    retry_at = row.next_attempt_at
    if retry_at is not None and retry_at.replace(tzinfo=retry_at.tzinfo or UTC) > now:
        return (f"a retry after a transient failure, due at {retry_at:%H:%M:%S} UTC "
                f"(attempt {row.attempt + 1})")
    if row.expensive and limit and expensive_running >= limit:
        return f"expensive templates run {limit} at a time, and {expensive_running} is running"
    if running >= run.max_parallel:
        return f"all {run.max_parallel} slots of the run are taken ({running} running)"
    if run.status == "pending":
        return "the run has not started launching yet (the next reconcile pass will)"
    return "next in launch order: it starts when the reconciler next passes"
