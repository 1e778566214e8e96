"""Proactive notices while a run goes, computed from the database.

- a sandbox running past 1.5x its template's max runtime estimate;
- a sandbox whose cost is above its template's max cost estimate;
- a sandbox with repeated transient errors (3 or more `error` events, or a retry
  after a transient failure).
Each notice has a stable `key`, so a stream or a conversation says it once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, func, select

from controller.catalog.templates import Catalog
from controller.db.schema import events, sandboxes
from controller.principal.untrusted import quoted

SLOW_FACTOR = 1.5
REPEATED_ERRORS = 3


def run_notices(
    engine: Engine, catalog: Catalog, run_id: str, now: datetime | None = None
) -> list[dict[str, Any]]:
    """What is worth telling about a run right now."""
    now = now or datetime.now(UTC)
    with engine.connect() as conn:
        rows = conn.execute(
            select(sandboxes).where(sandboxes.c.run_id == run_id).order_by(sandboxes.c.position)
        ).all()
        counted = conn.execute(
            select(events.c.sandbox_id, func.count())
            .where(events.c.run_id == run_id, events.c.type == "error")
            .group_by(events.c.sandbox_id)
        ).all()
    errors: dict[str, int] = {str(row[0]): int(row[1]) for row in counted}
    notices: list[dict[str, Any]] = []
    for row in rows:
        template = catalog.templates.get(row.template_id)
        if template is None:
            continue
        notices.extend(_sandbox_notices(row, template.cost_usd[1], template.runtime_s[1],
                                        errors.get(row.id, 0), now))
    return notices


def _sandbox_notices(
    row: Any, max_cost: float, max_runtime: float, error_count: int, now: datetime
) -> list[dict[str, Any]]:
    found = []
    cost = row.cost_usd + row.prior_cost_usd
    if row.status == "running" and row.started_at is not None:
        elapsed = (now - row.started_at).total_seconds()
        if elapsed > SLOW_FACTOR * max_runtime:
            found.append(("slow", f"{row.template_id} has run {elapsed / 60:.1f} min, past "
                          f"{SLOW_FACTOR}x its {max_runtime / 60:.1f} min max estimate"))
    if cost > max_cost:
        found.append(("cost", f"{row.template_id} has cost ${cost:,.2f}, above its "
                      f"${max_cost:,.2f} max estimate"))
    if error_count >= REPEATED_ERRORS or (row.attempt >= 2 and row.transient):
        found.append(("errors", f"{row.template_id} hit repeated transient errors "
                      f"({error_count} error events, attempt {row.attempt})"
                      + (f": {quoted(row.error[:200])}" if row.error else "")))
    return [
        {"key": f"{kind}:{row.id}", "kind": kind, "run_id": row.run_id, "sandbox_id": row.id,
         "template_id": row.template_id, "message": message}
        for kind, message in found
    ]
