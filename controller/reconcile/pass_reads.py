"""What a reconcile pass reads: the active runs, their running sandboxes (in full, or only
counted), the rows that may owe a cost alert, and the next pending sandboxes.

A pass follows every exit, so at a thousand sandboxes there are tens a second. Each row
read from SQLite gives up the GIL and waits to take it back, and decodes the row's JSON
spec: a pass that only launches into freed slots counts the running sandboxes instead
of reading them. The statements are built once and bound per pass (building one cost
more than running it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, case, func, or_, select

from controller.db.plans import select_runs, with_plans
from controller.db.schema import runs, sandboxes
from controller.states import ACTIVE_RUN, SandboxStatus


@dataclass(frozen=True)
class Running:
    """A run's running sandboxes as a pass sees them: how many, how many of them are
    expensive, and the rows themselves when the pass read them (None: only counted)."""

    count: int = 0
    expensive: int = 0
    rows: tuple[Any, ...] | None = None


NONE_RUNNING = Running(rows=())

_ACTIVE = select_runs(runs.c.status.in_(list(ACTIVE_RUN)))
_IN_RUNS = sandboxes.c.run_id.in_(bindparam("b_run_ids", expanding=True))
_RUNNING_ROWS = select(sandboxes).where(sandboxes.c.status == SandboxStatus.RUNNING, _IN_RUNS)
_RUNNING_TALLY = (
    select(
        sandboxes.c.run_id,
        func.count(),
        func.sum(case((sandboxes.c.expensive, 1), else_=0)),
    )
    .where(sandboxes.c.status == SandboxStatus.RUNNING, _IN_RUNS)
    .group_by(sandboxes.c.run_id)
)
# Running or lately ended, not alerted yet, with a cost at all (nothing is over an
# estimate at $0, so a run of no-ops reads no rows here).
_ALERT_CANDIDATES = select(sandboxes).where(
    sandboxes.c.run_id == bindparam("b_run_id"),
    or_(
        sandboxes.c.status == SandboxStatus.RUNNING,
        sandboxes.c.finished_at >= bindparam("b_since"),
    ),
    sandboxes.c.cost_alerted.is_(False),
    sandboxes.c.cost_usd + sandboxes.c.prior_cost_usd > 0,
)
_PENDING = (
    select(sandboxes)
    .where(
        sandboxes.c.run_id == bindparam("b_run_id"),
        sandboxes.c.status == SandboxStatus.PENDING,
        sandboxes.c.position > bindparam("b_after"),
    )
    .order_by(sandboxes.c.position)
    .limit(bindparam("b_page"))
)
_PENDING_IN_STAGE = _PENDING.where(sandboxes.c.stage == bindparam("b_stage"))


def active_runs(conn: Connection) -> list[Any]:
    """The active runs, each plan parsed once (controller.db.plans)."""
    return with_plans(conn, conn.execute(_ACTIVE).all())


def running_rows(conn: Connection, run_ids: Sequence[str]) -> Sequence[Any]:
    """Every running sandbox of these runs, in full."""
    return conn.execute(_RUNNING_ROWS, {"b_run_ids": list(run_ids)}).all() if run_ids else []


def running_by_run(rows: Sequence[Any]) -> dict[str, Running]:
    """Running rows grouped by run, counted, kept."""
    grouped: dict[str, list[Any]] = {}
    for row in rows:
        grouped.setdefault(row.run_id, []).append(row)
    return {
        run_id: Running(len(members), sum(1 for r in members if r.expensive), tuple(members))
        for run_id, members in grouped.items()
    }


def running_counts(conn: Connection, run_ids: Sequence[str]) -> dict[str, Running]:
    """How many sandboxes of each run run, and how many of those are expensive."""
    if not run_ids:
        return {}
    tally = conn.execute(_RUNNING_TALLY, {"b_run_ids": list(run_ids)})
    return {run_id: Running(int(count), int(expensive or 0)) for run_id, count, expensive in tally}


def alert_candidates(conn: Connection, run_id: str, since: datetime) -> Sequence[Any]:
    """Rows whose cost may have just passed their estimate: running ones and those that
    ended since `since` (a cost no longer changes once the end is recorded)."""
    return conn.execute(_ALERT_CANDIDATES, {"b_run_id": run_id, "b_since": since}).all()


def pending_page(
    conn: Connection, run_id: str, after: int, page: int, stage: int | None
) -> Sequence[Any]:
    """Up to `page` pending sandboxes of the run (of `stage`, if staged) past position
    `after`, in launch order."""
    values: dict[str, Any] = {"b_run_id": run_id, "b_after": after, "b_page": page}
    if stage is None:
        return conn.execute(_PENDING, values).all()
    return conn.execute(_PENDING_IN_STAGE, {**values, "b_stage": stage}).all()
