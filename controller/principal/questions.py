"""Questions about runs, recognised in plain words and answered from the database.

"how's portal_unicorn doing?", "what failed and why?", "what has run R cost so
far?", "what's running?" and "cancel R". `recognise` is pure; the `answer_*`
functions read the database (the single source of truth) and answer with
numbers: states, steps, costs against estimates and budgets, errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select

from controller.catalog.templates import Catalog
from controller.db.schema import runs, sandboxes
from controller.language.lexicon import Kind, lexicon_for
from controller.language.walk import items_of
from controller.runs import get_run, list_runs
from controller.states import ACTIVE_RUN, FAILED_SANDBOX

RUN_ID = re.compile(r"(?<![\w-])(run-[0-9a-f]{8})(?![\w-])")
_CANCEL = re.compile(r"^\s*(?:please\s+)?(?:cancel|stop|abort|kill|halt)\b")
_STATUS = re.compile(
    r"\bhow(?:'s|s| is| are| far along is)\b.*\b(?:doing|going|coming along|getting on|"
    r"progressing|looking)\b|^\s*(?:status|progress)\b|\bwhere (?:is|are)\b.*\bat\b|"
    r"\bwhat(?:'s| is| has)? happen(?:ed|ing)\b|\bany news\b|\bupdate on\b"
)
_FAILED = re.compile(
    r"\b(?:what|which|anything|did anything|has anything)\b.*\b(?:fail(?:ed|ing|ures?)?|went "
    r"wrong|broke|errors?)\b|\bwhy did\b.*\bfail\b|^\s*(?:failures|errors)\b"
)
_COST = re.compile(
    r"\b(?:how much|what)\b.*\b(?:cost|spent|spend|costing)\b.*\b(?:so far|until now|to date|"
    r"yet|now)\b|\b(?:has|have)\b.*\b(?:cost|spent)\b|\bcost so far\b|\bspent so far\b|"
    r"\bhow much (?:have we|did we|has it) spen[dt]\b"
)
_RUNNING = re.compile(
    r"\bwhat(?:'s| is| are)\b.*\brunning\b|\b(?:is )?anything running\b|\bactive runs\b|"
    r"^\s*(?:list|show)(?: me)?(?: the)? runs\b|\bwhat runs\b"
)


@dataclass(frozen=True)
class Question:
    kind: str  # status | failures | cost | running | cancel
    run_id: str | None = None
    templates: tuple[str, ...] = ()


def recognise(catalog: Catalog, text: str) -> Question | None:
    """The question `text` asks, or None when it is not a question about runs."""
    lowered = text.lower().replace("\u2019", "'")
    found = RUN_ID.search(lowered)
    run_id = found.group(1) if found else None
    for kind, pattern in (("cancel", _CANCEL), ("failures", _FAILED), ("cost", _COST),
                          ("status", _STATUS), ("running", _RUNNING)):
        if pattern.search(lowered):
            templates = named_templates(catalog, RUN_ID.sub(" ", lowered))
            return Question(kind, run_id, templates if kind == "status" else ())
    return None


def named_templates(catalog: Catalog, text: str) -> tuple[str, ...]:
    """The template ids `text` names, written or spoken."""
    items = items_of(lexicon_for(catalog), text)
    return tuple(dict.fromkeys(i.meaning.value for i in items
                               if i.meaning and i.meaning.kind is Kind.TEMPLATE))


@dataclass(frozen=True)
class Answer:
    text: str
    data: dict[str, Any]
    run_id: str | None = None


def latest_run_id(engine: Engine) -> str | None:
    with engine.connect() as conn:
        row = conn.execute(select(runs.c.id).order_by(runs.c.created_at.desc()).limit(1)).first()
    return str(row.id) if row else None


def answer_status(engine: Engine, catalog: Catalog, question: Question,
                  run_id: str | None) -> Answer:
    """How a template (its latest sandbox), or a run, is doing."""
    if question.templates and not question.run_id:
        lines, rows = [], []
        for template_id in question.templates[:10]:
            row = _latest_sandbox(engine, template_id)
            if row is None:
                lines.append(f"{template_id} has not run yet.")
                continue
            rows.append(row)
            lines.append(_sandbox_line(catalog, row))
        return Answer("\n".join(lines), {"sandboxes": rows},
                      rows[0]["run_id"] if len(rows) == 1 else None)
    target = question.run_id or run_id or latest_run_id(engine)
    if target is None:
        return Answer("No run yet. Ask me to run something, e.g. 'run quick under $10'.", {})
    run = get_run(engine, target)
    return Answer(_run_summary(run), {"run": run}, target)


def answer_failures(engine: Engine, question: Question, run_id: str | None) -> Answer:
    target = question.run_id or run_id or latest_run_id(engine)
    if target is None:
        return Answer("No run yet, so nothing has failed.", {})
    run = get_run(engine, target)
    failed = [s for s in run["sandboxes"] if s["status"] in FAILED_SANDBOX]
    if not failed:
        return Answer(f"Nothing failed in {target}. {_counts(run)}", {"failed": []}, target)
    lines = [f"{len(failed)} of {len(run['sandboxes'])} failed in {target}:"]
    for s in failed[:20]:
        error = (s["error"] or "no error recorded")[:300]
        lines.append(
            f"- {s['template_id']}: {s['status']} after {s['attempts']} attempt(s), "
            f"exit code {s['exit_code']}: {error}"
        )
    if len(failed) > 20:
        lines.append(f"... and {len(failed) - 20} more (`simplectl status {target}`)")
    return Answer("\n".join(lines), {"failed": failed}, target)


def answer_cost(engine: Engine, question: Question, run_id: str | None) -> Answer:
    target = question.run_id or run_id or latest_run_id(engine)
    if target is None:
        return Answer("No run yet, so nothing has been spent.", {})
    run = get_run(engine, target)
    spent = round(sum(s["cost_usd"] for s in run["sandboxes"]), 2)
    low, high = run["plan"]["estimated_cost_usd"]
    budget = f" of its ${run['budget_usd']:,.2f} budget" if run["budget_usd"] else ""
    active = sum(1 for s in run["sandboxes"] if s["status"] in ("pending", "running"))
    text = (
        f"{target} has cost ${spent:,.2f} so far{budget} (estimate ${low:,.2f}-{high:,.2f}); "
        f"it is {run['status']}" + (f", {active} sandboxes still to finish." if active else ".")
    )
    return Answer(text, {"run_id": target, "cost_usd": spent, "status": run["status"],
                         "budget_usd": run["budget_usd"], "estimated_cost_usd": [low, high]},
                  target)


def answer_running(engine: Engine) -> Answer:
    active = [r for r in list_runs(engine, 200) if r["status"] in ACTIVE_RUN]
    if not active:
        return Answer("Nothing is running.", {"runs": []})
    lines = [f"{len(active)} run(s) going:"]
    details = []
    for summary in active[:10]:
        run = get_run(engine, summary["run_id"])
        details.append(run)
        lines.append("- " + _run_summary(run))
    return Answer("\n".join(lines), {"runs": details},
                  active[0]["run_id"] if len(active) == 1 else None)


def _latest_sandbox(engine: Engine, template_id: str) -> dict[str, Any] | None:
    query = (
        select(sandboxes.c.id, sandboxes.c.run_id)
        .join(runs, runs.c.id == sandboxes.c.run_id)
        .where(sandboxes.c.template_id == template_id)
        .order_by(runs.c.created_at.desc())
        .limit(1)
    )
    with engine.connect() as conn:
        row = conn.execute(query).first()
    if row is None:
        return None
    run = get_run(engine, row.run_id)
    return next(s for s in run["sandboxes"] if s["sandbox_id"] == row.id)


def _sandbox_line(catalog: Catalog, s: dict[str, Any]) -> str:
    template = catalog.templates.get(s["template_id"])
    estimate = (
        f" (estimate ${template.cost_usd[0]:,.2f}-{template.cost_usd[1]:,.2f}, "
        f"{_minutes(template.runtime_s[1])} at most)"
        if template else ""
    )
    step = f", step {s['step']}/{s['steps_total']}" if s["step"] is not None else ""
    elapsed = ""
    if s["started_at"]:
        end = datetime.fromisoformat(s["finished_at"]) if s["finished_at"] else datetime.now(UTC)
        elapsed = f", {_minutes((end - datetime.fromisoformat(s['started_at'])).total_seconds())}"
        elapsed += " so far" if not s["finished_at"] else " in all"
    error = f"; last error: {s['error'][:200]}" if s["error"] else ""
    return (
        f"{s['template_id']} in {s['run_id']}: {s['status']}{step}, "
        f"${s['cost_usd']:,.2f} spent{estimate}{elapsed}, attempt {s['attempts']}{error}."
    )


def _run_summary(run: dict[str, Any]) -> str:
    spent = sum(s["cost_usd"] for s in run["sandboxes"])
    budget = f" of ${run['budget_usd']:,.2f} budget" if run["budget_usd"] else ""
    low, high = run["plan"]["estimated_cost_usd"]
    return (
        f"{run['run_id']} is {run['status']}: {_counts(run)} ${spent:,.2f} spent{budget} "
        f"(estimate ${low:,.2f}-{high:,.2f})."
    )


def _counts(run: dict[str, Any]) -> str:
    by_state: dict[str, int] = {}
    for s in run["sandboxes"]:
        by_state[s["status"]] = by_state.get(s["status"], 0) + 1
    parts = ", ".join(f"{n} {state}" for state, n in sorted(by_state.items()))
    return f"{len(run['sandboxes'])} sandboxes ({parts});"


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"
