"""Answers across runs, from the database: what templates cost, which cost most, which fail.

Each answer says the numbers and cites the runs it read (`runs` in its data, and the
ids in its words), so an operator can open them. Costs are what sandboxes reported
(every attempt's), never estimates; an estimate is shown beside them to compare.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select

from controller.catalog.templates import Catalog
from controller.db.schema import runs, sandboxes
from controller.principal.untrusted import quoted
from controller.states import FAILED_SANDBOX, SandboxStatus

FINAL = frozenset({SandboxStatus.SUCCEEDED, *FAILED_SANDBOX})
TOP = 5
CITED = 8  # run ids named in the words; all of them are in the data


@dataclass(frozen=True)
class Answer:
    text: str
    data: dict[str, Any]
    run_id: str | None = None  # the run the conversation follows from here, if one


def window_start(since: str | None, now: datetime | None = None) -> datetime | None:
    """The start of "today", "yesterday", "this week", "this month" (UTC), or None."""
    now = now or datetime.now(UTC)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return {"today": midnight, "yesterday": midnight - timedelta(days=1),
            "week": midnight - timedelta(days=7), "month": midnight - timedelta(days=30)
            }.get(since or "")


def window_end(since: str | None, now: datetime | None = None) -> datetime | None:
    if since != "yesterday":
        return None
    now = now or datetime.now(UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def sandbox_rows(engine: Engine, template_id: str | None = None, run_id: str | None = None,
                 since: str | None = None) -> list[dict[str, Any]]:
    """Sandboxes (template, run, status, cost, tokens, error), newest run first."""
    query = (
        select(sandboxes.c.template_id, sandboxes.c.run_id, sandboxes.c.status,
               (sandboxes.c.cost_usd + sandboxes.c.prior_cost_usd).label("cost_usd"),
               sandboxes.c.tokens, sandboxes.c.error, sandboxes.c.exit_code,
               sandboxes.c.attempt, runs.c.created_at)
        .join(runs, runs.c.id == sandboxes.c.run_id)
        .order_by(runs.c.created_at.desc(), sandboxes.c.position)
    )
    if template_id:
        query = query.where(sandboxes.c.template_id == template_id)
    if run_id:
        query = query.where(sandboxes.c.run_id == run_id)
    start, end = window_start(since), window_end(since)
    if start:
        query = query.where(runs.c.created_at >= start)
    if end:
        query = query.where(runs.c.created_at < end)
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(query)]


def cite(run_ids: Iterable[str]) -> str:
    ids = list(dict.fromkeys(run_ids))
    if not ids:
        return ""
    more = f" and {len(ids) - CITED} more" if len(ids) > CITED else ""
    return f" (from {', '.join(ids[:CITED])}{more})"


def _when(since: str | None) -> str:
    return {"today": " today", "yesterday": " yesterday", "week": " in the last 7 days",
            "month": " in the last 30 days"}.get(since or "", "")


def template_cost(engine: Engine, catalog: Catalog, template_id: str,
                  since: str | None = None) -> Answer:
    """A template's reported cost over its runs, against its estimate."""
    rows = sandbox_rows(engine, template_id=template_id, since=since)
    template = catalog.templates.get(template_id)
    estimate = (f" Its estimate is ${template.cost_usd[0]:,.2f}-{template.cost_usd[1]:,.2f}."
                if template else "")
    if not rows:
        return Answer(f"{template_id} has not run{_when(since)}.{estimate}",
                      {"template_id": template_id, "runs": [], "sandboxes": 0})
    costs = [r["cost_usd"] for r in rows]
    run_ids = [r["run_id"] for r in rows]
    text = (f"{template_id} ran {len(rows)} time(s){_when(since)}: ${sum(costs):,.2f} in all, "
            f"${sum(costs) / len(costs):,.2f} on average (${min(costs):,.2f}-"
            f"${max(costs):,.2f}); the latest, in {run_ids[0]}, cost ${costs[0]:,.2f}."
            f"{estimate}{cite(run_ids)}")
    return Answer(text, {
        "template_id": template_id, "sandboxes": len(rows), "total_usd": round(sum(costs), 6),
        "average_usd": round(sum(costs) / len(costs), 6), "min_usd": min(costs),
        "max_usd": max(costs), "runs": list(dict.fromkeys(run_ids)),
        "estimated_cost_usd": list(template.cost_usd) if template else None,
    })


def most_expensive(engine: Engine, run_id: str | None = None,
                   since: str | None = None) -> Answer:
    """Templates by reported cost, most first (in one run, or over all runs)."""
    rows = sandbox_rows(engine, run_id=run_id, since=since)
    where = f" in {run_id}" if run_id else _when(since)
    if not rows:
        return Answer(f"Nothing has run{where} yet, so nothing has cost anything.",
                      {"templates": [], "runs": []})
    ranked = _by_template(rows, lambda group: sum(r["cost_usd"] for r in group))
    lines = [f"The most expensive templates{where}, by what they reported:"]
    for entry in ranked[:TOP]:
        each = entry["value"] / entry["sandboxes"]
        lines.append(f"- {entry['template_id']}: ${entry['value']:,.2f} over "
                     f"{entry['sandboxes']} sandbox(es), ${each:,.2f} each{cite(entry['runs'])}")
    return Answer("\n".join(lines), {"templates": ranked[:TOP], "runs": _runs(rows)}, run_id)


def least_reliable(engine: Engine, since: str | None = None) -> Answer:
    """Templates by the share of their finished sandboxes that failed, worst first."""
    rows = [r for r in sandbox_rows(engine, since=since) if r["status"] in FINAL]
    ranked = [e for e in _by_template(rows, lambda group: _failure_rate(group))
              if e["value"] > 0]
    if not ranked:
        finished = len(rows)
        return Answer(f"No template has failed{_when(since)} ({finished} finished "
                      f"sandbox(es) read){cite(_runs(rows))}.",
                      {"templates": [], "runs": _runs(rows)})
    lines = [f"The least reliable templates{_when(since)}:"]
    for entry in ranked[:TOP]:
        failed = [r for r in rows if r["template_id"] == entry["template_id"]
                  and r["status"] in FAILED_SANDBOX]
        lines.append(f"- {entry['template_id']}: {len(failed)} of {entry['sandboxes']} failed "
                     f"({entry['value']:.0%}); last error: {_error(failed[0])}"
                     f"{cite(r['run_id'] for r in failed)}")
    return Answer("\n".join(lines), {"templates": ranked[:TOP], "runs": _runs(rows)})


def template_failures(engine: Engine, template_id: str) -> Answer:
    """A template's failed sandboxes over its runs, newest first, with their errors."""
    rows = sandbox_rows(engine, template_id=template_id)
    failed = [r for r in rows if r["status"] in FAILED_SANDBOX]
    if not rows:
        return Answer(f"{template_id} has not run yet.", {"failed": [], "runs": []})
    if not failed:
        return Answer(f"{template_id} has not failed: {len(rows)} sandbox(es), latest "
                      f"{rows[0]['status']} in {rows[0]['run_id']}{cite(_runs(rows))}.",
                      {"failed": [], "runs": _runs(rows)}, rows[0]["run_id"])
    lines = [f"{template_id} failed {len(failed)} of {len(rows)} time(s):"]
    for r in failed[:10]:
        lines.append(f"- in {r['run_id']}: {r['status']} after {r['attempt']} attempt(s), exit "
                     f"code {r['exit_code']}: {_error(r)}")
    return Answer("\n".join(lines), {"failed": failed[:10], "runs": _runs(failed)},
                  failed[0]["run_id"])


def tokens(engine: Engine, template_id: str | None = None, run_id: str | None = None,
           since: str | None = None) -> Answer:
    """Tokens reported: of a run, of a template over its runs, or of every run in a window."""
    rows = sandbox_rows(engine, template_id=template_id, run_id=run_id, since=since)
    what = run_id or template_id or "all runs"
    total = sum(r["tokens"] or 0 for r in rows)
    if not rows:
        return Answer(f"No sandbox of {what} has run{_when(since)}, so no tokens were used.",
                      {"tokens": 0, "runs": []}, run_id)
    per = f", {total / len(rows):,.0f} per sandbox on average" if len(rows) > 1 else ""
    text = (f"{what} used {total:,} tokens{_when(since)} over {len(rows)} sandbox(es){per}"
            f"{cite(_runs(rows))}.")
    return Answer(text, {"tokens": total, "sandboxes": len(rows), "runs": _runs(rows)}, run_id)


def spend(engine: Engine, since: str | None) -> Answer:
    """What every run in a window cost."""
    rows = sandbox_rows(engine, since=since)
    total = sum(r["cost_usd"] for r in rows)
    run_ids = _runs(rows)
    text = (f"{len(run_ids)} run(s){_when(since)} cost ${total:,.2f} in all"
            f"{cite(run_ids)}." if rows else f"Nothing ran{_when(since)}: $0.00.")
    return Answer(text, {"cost_usd": round(total, 6), "runs": run_ids})


def _by_template(rows: Sequence[dict[str, Any]], value: Any) -> list[dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["template_id"], []).append(row)
    ranked = [{"template_id": t, "value": value(group), "sandboxes": len(group),
               "runs": _runs(group)} for t, group in groups.items()]
    return sorted(ranked, key=lambda e: (-e["value"], e["template_id"]))


def _failure_rate(group: Sequence[dict[str, Any]]) -> float:
    return sum(r["status"] in FAILED_SANDBOX for r in group) / len(group)


def _runs(rows: Iterable[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["run_id"] for r in rows))


def _error(row: dict[str, Any]) -> str:
    return quoted(row["error"][:200]) if row["error"] else "no error recorded"
