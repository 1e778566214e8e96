"""Shapes what the pages show from API-shaped data: totals, last messages, the timeline,
and the formatting filters. Pure functions: data in, data out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from controller.states import ACTIVE_SANDBOX, FAILED_SANDBOX

MESSAGE_MAX = 300
DASH = "\u2013"  # what a page shows for "no value"


def parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def run_totals(run: dict[str, Any]) -> dict[str, Any]:
    """Counts by state, progress and cost so far of a run (as GET /v1/runs/{id} gives it)."""
    sandboxes = run["sandboxes"]
    statuses = [s["status"] for s in sandboxes]
    total = len(sandboxes)
    done = sum(1 for s in statuses if s not in ACTIVE_SANDBOX)
    estimate = run["plan"].get("estimated_cost_usd") or [0.0, 0.0]
    return {
        "total": total,
        "done": done,
        "running": statuses.count("running"),
        "pending": statuses.count("pending"),
        "succeeded": statuses.count("succeeded"),
        "failed": sum(1 for s in statuses if s in FAILED_SANDBOX),
        "cancelled": statuses.count("cancelled"),
        "skipped": statuses.count("skipped"),
        "cost_usd": round(sum(s["cost_usd"] for s in sandboxes), 6),
        "estimate_usd": estimate,
        "budget_usd": run.get("budget_usd"),
        "progress_pct": percent(done, total),
    }


def cost_scale(cost: float, estimate_max: float, budget: float | None) -> dict[str, float]:
    """Widths (percent) of the cost bar: spent, the estimate's mark and the budget's mark."""
    top = max(cost, estimate_max, budget or 0.0) or 1.0
    return {
        "spent_pct": percent(cost, top),
        "estimate_pct": percent(estimate_max, top),
        "budget_pct": percent(budget, top) if budget else 0.0,
    }


def percent(part: float | None, whole: float | None) -> float:
    if not whole or part is None:
        return 0.0
    return round(min(100.0, max(0.0, 100.0 * part / whole)), 1)


def event_message(event_type: str, data: dict[str, Any]) -> str:
    """One line that says what an event reported (untrusted text: the page escapes it)."""
    if event_type == "progress":
        step, steps = data.get("step"), data.get("steps_total")
        text = f"step {step}/{steps}" if steps else f"step {step}"
        if isinstance(data.get("item_id"), str):
            text += f" · item {data['item_id']}"
        return text
    if event_type in ("error", "failed"):
        found = data.get("error")
        error: dict[str, Any] = found if isinstance(found, dict) else data
        kind = error.get("type") or "error"
        message = error.get("message") or ""
        return _cut(f"{event_type}: {kind}: {message}")
    if event_type == "started" and data.get("resumed_from_step"):
        return f"started (resumed from step {data['resumed_from_step']})"
    return event_type


def policy_text(policy: Any) -> str:
    """A stage's policy as words: all, best_effort, or quorum k."""
    if isinstance(policy, dict) and "quorum" in policy:
        return f"quorum {policy['quorum']}"
    return str(policy)


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 1] + "…"


def sandbox_duration(sandbox: dict[str, Any], now: datetime) -> float | None:
    start = parse_time(sandbox.get("launched_at") or sandbox.get("started_at"))
    if start is None:
        return None
    end = parse_time(sandbox.get("finished_at")) or now
    return max(0.0, (end - start).total_seconds())


@dataclass(frozen=True, slots=True)
class SandboxRow:
    """One row of the run page's table, its text ready (1,000 rows render fast)."""

    sandbox_id: str
    template_id: str
    status: str
    step: str
    cost: str
    attempts: int
    since: str
    until: str
    duration: str
    message: str
    stage_header: str | None


@dataclass(frozen=True, slots=True)
class Bar:
    """One attempt in the timeline, in seconds from the run's creation."""

    sandbox_id: str
    attempt: int
    x: float
    y: float
    width: float
    css: str
    title: str


def sandbox_rows(
    run: dict[str, Any], last: dict[str, dict[str, Any]], now: datetime
) -> list[SandboxRow]:
    """The table's rows; a staged run gets a header row where each stage begins."""
    stages = run["plan"].get("stages") or []
    rows, stage = [], -1
    for s in run["sandboxes"]:
        header = None
        if len(stages) > 1 and s.get("stage", 0) != stage:
            stage = s.get("stage", 0)
            policy = stages[stage].get("policy") if stage < len(stages) else None
            header = f"Stage {stage + 1} of {len(stages)}" + (
                f" · policy {policy_text(policy)}" if policy else ""
            )
        event = last.get(s["sandbox_id"])
        message = s["error"] or (event_message(event["type"], event["data"]) if event else "")
        rows.append(
            SandboxRow(
                sandbox_id=s["sandbox_id"],
                template_id=s["template_id"],
                status=s["status"],
                step=f"{_or_dash(s['step'])}/{_or_dash(s['steps_total'])}",
                cost=format_money(s["cost_usd"]),
                attempts=s["attempts"],
                since=s["launched_at"] or "",
                until=s["finished_at"] or "",
                duration=format_duration(sandbox_duration(s, now)),
                message=message,
                stage_header=header,
            )
        )
    return rows


def _or_dash(value: object) -> str:
    return DASH if value is None else str(value)


def timeline(
    run: dict[str, Any], attempts: dict[str, list[dict[str, Any]]], now: datetime
) -> dict[str, Any]:
    """Bars of the Gantt chart: one per attempt, in seconds from the run's creation.

    An attempt that is not its sandbox's last is a retry's predecessor, drawn as such.
    """
    origin = parse_time(run["created_at"]) or now
    end = parse_time(run.get("finished_at")) or now
    bars: list[Bar] = []
    for row, sandbox in enumerate(run["sandboxes"]):
        tries = attempts.get(sandbox["sandbox_id"], [])
        for n, attempt in enumerate(tries):
            start = attempt["started_at"]
            if start is None:
                continue
            stop = attempt["exited_at"] or attempt["finished_at"]
            live = stop is None and sandbox["status"] == "running" and n == len(tries) - 1
            stop = stop or (now if live else start)
            width = round(max(0.0, (stop - start).total_seconds()), 3)
            status = attempt["status"] if n == len(tries) - 1 else "retried"
            bars.append(
                Bar(
                    sandbox_id=sandbox["sandbox_id"],
                    attempt=attempt["attempt"],
                    x=round((start - origin).total_seconds(), 3),
                    y=row + 0.15,
                    width=width,
                    css=f"bar b-{status}" + (" live" if live else ""),
                    title=f"{sandbox['template_id']} · attempt {attempt['attempt']} · "
                    f"{attempt['status']} · {format_duration(width)}",
                )
            )
    span = max((end - origin).total_seconds(), max((b.x + b.width for b in bars), default=0))
    return {"bars": bars, "rows": len(run["sandboxes"]), "span_s": round(max(span, 1.0), 3)}


def row_height(rows: int) -> int:
    """Pixels per sandbox in the timeline: roomy for a few, dense for a thousand."""
    return 16 if rows <= 40 else 8 if rows <= 200 else 3


def format_money(value: float | None) -> str:
    if value is None:
        return DASH
    return f"${value:,.2f}" if abs(value) >= 0.01 or value == 0 else f"${value:,.4f}"


def format_number(value: float | int | None) -> str:
    if value is None:
        return DASH
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return DASH
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def format_time(value: str | None) -> str:
    """UTC text, shown until the page's script puts it in the viewer's time zone."""
    parsed = parse_time(value)
    return parsed.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if parsed else DASH


def coverage(by_mechanism: list[dict[str, Any]], covered: list[str]) -> list[dict[str, Any]]:
    """M1 to M17, each with how many templates used it, for the report's chart."""
    using = {m["mechanism"]: m for m in by_mechanism}
    top = max((m["templates_using"] for m in by_mechanism), default=1) or 1
    rows = []
    for n in range(1, 18):
        name = f"M{n}"
        found = using.get(name)
        count = found["templates_using"] if found else 0
        rows.append(
            {
                "mechanism": name,
                "templates": count,
                "cost_usd": found["total_cost_usd"] if found else None,
                "covered": name in covered,
                "pct": percent(count, top),
            }
        )
    return rows
