"""Per-item results of batch sandboxes: counts for the report, and the paginated item table.

An item `passed` or `failed` when it ran to a verdict (status `succeeded`), and is
`errored` when it raised (status `failed`, `error` set); `skipped` items did not run.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, Engine, and_, or_, select, text

from controller.db.schema import result_items

MAX_PAGE = 1000
MAX_JUNIT_ITEMS = 100_000

_COUNTS_SQL = """
SELECT sandbox_id, COUNT(*),
       SUM(CASE WHEN status = 'succeeded' AND passed = 1 THEN 1 ELSE 0 END),
       SUM(CASE WHEN status = 'succeeded' AND passed = 0 THEN 1 ELSE 0 END),
       SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END)
FROM result_items WHERE run_id = :run_id GROUP BY sandbox_id
"""
_STEPS_SQL = """
SELECT sandbox_id, COUNT(*) FROM result_steps WHERE run_id = :run_id GROUP BY sandbox_id
"""
EMPTY = {"total": 0, "passed": 0, "failed": 0, "errored": 0}


def item_counts(conn: Connection, run_id: str) -> dict[str, dict[str, int]]:
    """{sandbox_id: {"total", "passed", "failed", "errored"}} for the run's batch sandboxes."""
    return {
        r[0]: {"total": int(r[1]), "passed": int(r[2] or 0), "failed": int(r[3] or 0),
               "errored": int(r[4] or 0)}
        for r in conn.execute(text(_COUNTS_SQL), {"run_id": run_id})
    }


def steps_recorded(conn: Connection, run_id: str) -> dict[str, int]:
    """{sandbox_id: number of aggregated step rows}."""
    return {r[0]: int(r[1]) for r in conn.execute(text(_STEPS_SQL), {"run_id": run_id})}


def add_counts(counts: list[dict[str, int]]) -> dict[str, int]:
    """The sum of several {"total", "passed", "failed", "errored"}. Pure."""
    return {k: sum(c[k] for c in counts) for k in EMPTY}


def outcome(row: dict[str, Any]) -> str:
    """passed, failed, errored or skipped, from an item row. Pure."""
    if row["status"] == "succeeded":
        return "passed" if row["passed"] else "failed"
    return "errored" if row["status"] == "failed" else "skipped"


def list_items(engine: Engine, run_id: str, *, limit: int = 100,
               after: tuple[str, str] | None = None, sandbox_id: str | None = None,
               outcome_filter: str | None = None) -> list[dict[str, Any]]:
    """One page of the run's item rows, by (sandbox_id, item_id), after a cursor."""
    t = result_items
    query = select(t).where(t.c.run_id == run_id)
    if sandbox_id:
        query = query.where(t.c.sandbox_id == sandbox_id)
    if outcome_filter == "passed":
        query = query.where(t.c.status == "succeeded", t.c.passed == 1)
    elif outcome_filter == "failed":
        query = query.where(t.c.status == "succeeded", t.c.passed == 0)
    elif outcome_filter == "errored":
        query = query.where(t.c.status == "failed")
    elif outcome_filter == "skipped":
        query = query.where(t.c.status == "skipped")
    if after is not None:
        query = query.where(or_(t.c.sandbox_id > after[0],
                                and_(t.c.sandbox_id == after[0], t.c.item_id > after[1])))
    query = query.order_by(t.c.sandbox_id, t.c.item_id).limit(min(limit, MAX_PAGE))
    with engine.connect() as conn:
        return [public_item(r._asdict()) for r in conn.execute(query)]


def public_item(row: dict[str, Any]) -> dict[str, Any]:
    """An item row as the API shows it. Pure."""
    return {
        "sandbox_id": row["sandbox_id"],
        "template_id": row["template_id"],
        "item_id": row["item_id"],
        "status": row["status"],
        "outcome": outcome(row),
        "passed": None if row["passed"] is None else bool(row["passed"]),
        "reason": row["reason"],
        "error": row["error"],
        "duration_ms": row["duration_ms"],
        "data": _json(row["data"]),
    }


def _json(raw: str | None) -> Any:
    try:
        return None if raw is None else json.loads(raw)
    except ValueError:
        return raw


def all_items(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    """Every item row of the run (for JUnit), at most MAX_JUNIT_ITEMS, page by page."""
    rows: list[dict[str, Any]] = []
    after = None
    while len(rows) < MAX_JUNIT_ITEMS:
        page = list_items(engine, run_id, limit=MAX_PAGE, after=after)
        rows.extend(page)
        if len(page) < MAX_PAGE:
            break
        after = (page[-1]["sandbox_id"], page[-1]["item_id"])
    return rows[:MAX_JUNIT_ITEMS]
