"""What the dashboard reads from the database, beyond the API's own functions. Read-only.

Every query is bounded: pages of runs, the latest events, one run's attempts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, case, func, select

from controller.db.plans import select_runs, with_plans
from controller.db.schema import attempts, events, runs, sandboxes
from controller.runs import public_run
from controller.states import FAILED_SANDBOX, SandboxStatus

RUNS_PER_PAGE = 25
EVENTS_SHOWN = 200


def runs_page(
    engine: Engine, page: int, status: str | None, per_page: int = RUNS_PER_PAGE
) -> tuple[list[dict[str, Any]], bool]:
    """One page of runs, newest first, each with sandbox counts and cost so far; and
    whether there is a next page."""
    query = select_runs().order_by(runs.c.created_at.desc(), runs.c.id.desc())
    if status:
        query = query.where(runs.c.status == status)
    query = query.offset((page - 1) * per_page).limit(per_page + 1)
    with engine.connect() as conn:
        rows = [public_run(vars(r)) for r in with_plans(conn, conn.execute(query).all())]
        more = len(rows) > per_page
        rows = rows[:per_page]
        counts = _sandbox_counts(conn, [r["run_id"] for r in rows])
    empty = {"total": 0, "done": 0, "succeeded": 0, "failed": 0, "cost_usd": 0.0}
    return [{**r, **counts.get(r["run_id"], empty)} for r in rows], more


def _sandbox_counts(conn: Any, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    if not run_ids:
        return {}
    active = (SandboxStatus.PENDING, SandboxStatus.RUNNING)
    query = (
        select(
            sandboxes.c.run_id,
            func.count().label("total"),
            func.sum(case((sandboxes.c.status.in_(active), 0), else_=1)).label("done"),
            func.sum(case((sandboxes.c.status == SandboxStatus.SUCCEEDED, 1), else_=0)).label(
                "succeeded"
            ),
            func.sum(case((sandboxes.c.status.in_(tuple(FAILED_SANDBOX)), 1), else_=0)).label(
                "failed"
            ),
            func.sum(sandboxes.c.cost_usd + sandboxes.c.prior_cost_usd).label("cost_usd"),
        )
        .where(sandboxes.c.run_id.in_(run_ids))
        .group_by(sandboxes.c.run_id)
    )
    return {
        r.run_id: {
            "total": int(r.total),
            "done": int(r.done or 0),
            "succeeded": int(r.succeeded or 0),
            "failed": int(r.failed or 0),
            "cost_usd": round(float(r.cost_usd or 0.0), 6),
        }
        for r in conn.execute(query)
    }


def latest_events(
    engine: Engine, run_id: str, sandbox_id: str | None = None, limit: int = EVENTS_SHOWN
) -> list[dict[str, Any]]:
    """The run's (or one sandbox's) latest events, newest first."""
    query = select(
        events.c.id,
        events.c.sandbox_id,
        events.c.attempt,
        events.c.seq,
        events.c.type,
        events.c.time,
        events.c.data,
    ).where(events.c.run_id == run_id)
    if sandbox_id:
        query = query.where(events.c.sandbox_id == sandbox_id)
    query = query.order_by(events.c.id.desc()).limit(limit)
    with engine.connect() as conn:
        return [{**r._asdict(), "time": _iso(r.time)} for r in conn.execute(query)]


def last_event_id(engine: Engine, run_id: str) -> int:
    with engine.connect() as conn:
        value = conn.execute(select(func.max(events.c.id)).where(events.c.run_id == run_id))
        return int(value.scalar() or 0)


def last_event_per_sandbox(engine: Engine, run_id: str) -> dict[str, dict[str, Any]]:
    """Each sandbox's most recent event (its 'last message')."""
    latest = (
        select(func.max(events.c.id))
        .where(events.c.run_id == run_id)
        .group_by(events.c.sandbox_id)
        .scalar_subquery()
    )
    # `id IN (...)`: primary-key lookups (a join on the grouped subquery scanned events).
    query = select(events.c.sandbox_id, events.c.type, events.c.data).where(events.c.id.in_(latest))
    with engine.connect() as conn:
        return {r.sandbox_id: {"type": r.type, "data": r.data} for r in conn.execute(query)}


def run_attempts(engine: Engine, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every attempt of every sandbox of the run, by sandbox, in attempt order."""
    query = (
        select(
            attempts.c.sandbox_id,
            attempts.c.attempt,
            attempts.c.status,
            attempts.c.started_at,
            attempts.c.exited_at,
            attempts.c.finished_at,
        )
        .join(sandboxes, sandboxes.c.id == attempts.c.sandbox_id)
        .where(sandboxes.c.run_id == run_id)
        .order_by(attempts.c.sandbox_id, attempts.c.attempt)
    )
    found: dict[str, list[dict[str, Any]]] = {}
    with engine.connect() as conn:
        for r in conn.execute(query):
            found.setdefault(r.sandbox_id, []).append(r._asdict())
    return found


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
