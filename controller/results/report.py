"""The run report: per-sandbox rows and totals, as JSON, JUnit XML or Markdown.

Queries run in SQL (mechanisms through the database's JSON functions); the
report itself is built by pure functions from their rows.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Engine, select, text

from controller.db.plans import run_with_plan
from controller.db.schema import attempts, sandboxes
from controller.errors import NotFoundError
from controller.results.item_results import EMPTY, add_counts, item_counts, steps_recorded
from controller.results.ledger import ledger_head
from controller.states import FAILED_SANDBOX, SandboxStatus

MECHANISMS_TOTAL = 17

_TOTALS_SQL = """
SELECT COALESCE(SUM(cost_usd), 0), COALESCE(SUM(tokens_used), 0), COALESCE(SUM(llm_calls), 0),
       COALESCE(SUM(entities_created), 0), COALESCE(SUM(timepoints_created), 0)
FROM result_runs WHERE run_id = :run_id
"""
_BY_SANDBOX_SQL = """
SELECT sandbox_id, SUM(cost_usd), SUM(tokens_used), SUM(llm_calls)
FROM result_runs WHERE run_id = :run_id GROUP BY sandbox_id
"""
_BY_TEMPLATE_SQL = """
SELECT template_id, COUNT(*), SUM(cost_usd), SUM(tokens_used), SUM(llm_calls),
       SUM(entities_created), SUM(timepoints_created)
FROM result_runs WHERE run_id = :run_id GROUP BY template_id ORDER BY template_id{collate}
"""
# PostgreSQL sorts text by its locale (en_US ignores `_`); "C" sorts as SQLite does.
_COLLATE = {"sqlite": "", "postgresql": ' COLLATE "C"'}
_BY_MECHANISM_SQL = {
    "sqlite": """
SELECT j.value AS mechanism, COUNT(DISTINCT r.template_id), SUM(r.cost_usd), AVG(r.cost_usd)
FROM result_runs r, json_each(r.mechanisms_used) j WHERE r.run_id = :run_id
GROUP BY j.value ORDER BY SUM(r.cost_usd) DESC, mechanism
""",
    "postgresql": """
SELECT m.mechanism, COUNT(DISTINCT r.template_id), SUM(r.cost_usd), AVG(r.cost_usd)
FROM result_runs r CROSS JOIN LATERAL jsonb_array_elements_text(r.mechanisms_used::jsonb)
  AS m(mechanism)
WHERE r.run_id = :run_id GROUP BY m.mechanism
ORDER BY SUM(r.cost_usd) DESC, m.mechanism COLLATE "C"
""",
}


REPORT_PAGE_MAX = 10_000  # report rows per page when a client asks for pages


def fetch_report(
    engine: Engine, run_id: str, limit: int | None = None, offset: int = 0
) -> dict[str, Any]:
    """Query everything the report needs and build it; `limit`/`offset` page its rows
    (totals always cover the whole run)."""
    with engine.connect() as conn:
        run = run_with_plan(conn, run_id)
        if run is None:
            raise NotFoundError(f"unknown run {run_id}", hint="list runs with `simplectl status`")
        rows = conn.execute(
            select(*[c for c in sandboxes.c if c.name not in ("spec", "token_hash")])
            .where(sandboxes.c.run_id == run_id)
            .order_by(sandboxes.c.position)
        ).all()
        params = {"run_id": run_id}
        dialect = "postgresql" if conn.dialect.name == "postgresql" else "sqlite"
        totals = _plain(conn.execute(text(_TOTALS_SQL), params).one())
        by_sandbox = {r[0]: r[1:] for r in _rows(conn, _BY_SANDBOX_SQL, params)}
        by_template = _rows(conn, _BY_TEMPLATE_SQL.format(collate=_COLLATE[dialect]), params)
        by_mechanism = _rows(conn, _BY_MECHANISM_SQL[dialect], params)
        head = ledger_head(conn, run_id)
        items = item_counts(conn, run_id)
        steps = steps_recorded(conn, run_id)
    report = build_report(
        vars(run),
        [r._asdict() for r in rows],
        totals,
        by_sandbox,
        by_template,
        by_mechanism,
        items,
        steps,
        head,
    )
    if limit is not None or offset:
        end = None if limit is None else offset + limit
        report["sandboxes"] = report["sandboxes"][offset:end]
    return report


def _rows(conn: Connection, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [_plain(r) for r in conn.execute(text(sql), params)]


def _plain(row: Any) -> tuple[Any, ...]:
    """Python numbers: PostgreSQL's SUM of integers is a numeric, which comes as Decimal."""
    return tuple(
        (int(v) if v == v.to_integral_value() else float(v)) if isinstance(v, Decimal) else v
        for v in row
    )


def build_report(
    run: dict[str, Any],
    sandbox_rows: list[dict[str, Any]],
    totals: tuple[Any, ...],
    by_sandbox: dict[str, tuple[Any, ...]],
    by_template: list[tuple[Any, ...]],
    by_mechanism: list[tuple[Any, ...]],
    items: dict[str, dict[str, int]] | None = None,
    steps: dict[str, int] | None = None,
    head: str | None = None,
) -> dict[str, Any]:
    """The JSON report of docs/architecture.md, from query rows. Pure."""
    statuses = [s["status"] for s in sandbox_rows]
    covered = sorted({m[0] for m in by_mechanism}, key=_mechanism_order)
    return {
        "run_id": run["id"],
        "status": run["status"],
        "created_at": _iso(run["created_at"]),
        "finished_at": _iso(run["finished_at"]),
        "plan": run["plan"],
        "ledger_head": head,
        "rerun_of": run.get("rerun_of"),
        "alerts": run.get("alerts") or [],
        "labels": run.get("labels") or {},
        "sandboxes_total": len(sandbox_rows),
        "sandboxes": [
            {
                **_sandbox_row(s, by_sandbox.get(s["id"])),
                "items": (items or {}).get(s["id"], EMPTY),
                "steps_recorded": (steps or {}).get(s["id"], 0),
            }
            for s in sandbox_rows
        ],
        "totals": {
            "sandboxes": len(sandbox_rows),
            "succeeded": statuses.count(SandboxStatus.SUCCEEDED),
            "failed": sum(1 for s in statuses if s in FAILED_SANDBOX),
            "cancelled": statuses.count(SandboxStatus.CANCELLED),
            "skipped": statuses.count(SandboxStatus.SKIPPED),
            "cost_usd": round(float(totals[0]), 6),
            "tokens_used": int(totals[1]),
            "llm_calls": int(totals[2]),
            "entities_created": int(totals[3]),
            "timepoints_created": int(totals[4]),
            "mechanisms_covered": covered,
            "mechanism_coverage_pct": round(100 * len(covered) / MECHANISMS_TOTAL, 1),
            "items": add_counts(list((items or {}).values())),
        },
        "by_template": [
            {
                "template_id": r[0],
                "runs": r[1],
                "cost_usd": _round(r[2]),
                "tokens_used": r[3],
                "llm_calls": r[4],
                "entities_created": r[5],
                "timepoints_created": r[6],
            }
            for r in by_template
        ],
        "by_mechanism": [
            {
                "mechanism": r[0],
                "templates_using": r[1],
                "total_cost_usd": _round(r[2]),
                "avg_cost_usd": _round(r[3]),
            }
            for r in by_mechanism
        ],
    }


def _sandbox_row(row: dict[str, Any], results: tuple[Any, ...] | None) -> dict[str, Any]:
    duration = None
    if row["launched_at"] and row["finished_at"]:
        duration = round((row["finished_at"] - row["launched_at"]).total_seconds(), 3)
    return {
        "sandbox_id": row["id"],
        "template_id": row["template_id"],
        "stage": row.get("stage") or 0,
        "status": row["status"],
        "attempts": row["attempt"],
        "exit_code": row["exit_code"],
        "duration_s": duration,
        "cost_usd": _round(results[0]) if results else None,
        "tokens_used": results[1] if results else None,
        "llm_calls": results[2] if results else None,
        "error": row["error"],
    }


def attempt_rows(conn: Connection, sandbox_id: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        select(attempts).where(attempts.c.sandbox_id == sandbox_id).order_by(attempts.c.attempt)
    ).all()
    return [
        {
            **r._asdict(),
            "started_at": _iso(r.started_at),
            "exited_at": _iso(r.exited_at),
            "finished_at": _iso(r.finished_at),
            "recorded_at": _iso(r.recorded_at),
        }
        for r in rows
    ]


def _mechanism_order(name: str) -> tuple[int, str]:
    return (int(name[1:]), name) if name[1:].isdigit() else (10**6, name)


def _round(value: Any) -> float | None:
    return None if value is None else round(float(value), 6)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def report_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False)
