"""Questions about runs answered from the database (the single source of truth).

`recognise` (pure, `controller.language.questions`) says what is asked; `answer` finds
the run or template it is about and answers with numbers: states, steps, costs against
estimates and budgets, errors, what waits and why, a run against the previous one of
the same request. Every answer names the runs it read. Answers across runs (a
template's cost, the most expensive, the least reliable, tokens) are `history`'s.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select

from controller.catalog.templates import Catalog
from controller.db.schema import runs, sandboxes
from controller.errors import NotFoundError
from controller.language.questions import RUN_ID, Question, recognise
from controller.principal import history
from controller.principal.history import Answer
from controller.principal.untrusted import quoted
from controller.principal.waiting import answer_waiting
from controller.runs import get_run, list_runs
from controller.states import ACTIVE_RUN, FAILED_SANDBOX

__all__ = ["RUN_ID", "Answer", "Question", "answer", "latest_run_id", "recognise"]


def answer(engine: Engine, catalog: Catalog, question: Question,
           followed: str | None = None) -> Answer:
    """The answer to `question`; `followed` is the run the conversation is about."""
    kind = question.kind
    if kind == "template_cost" and question.templates:
        return history.template_cost(engine, catalog, question.templates[0], question.since)
    if kind == "most_expensive":
        run_id = pick_run(engine, question, followed) if question.run_id or question.which \
            else None
        return history.most_expensive(engine, run_id, question.since)
    if kind == "least_reliable":
        return history.least_reliable(engine, question.since)
    if kind == "tokens" and not (question.run_id or question.which):
        return history.tokens(engine, template_id=next(iter(question.templates), None),
                              since=question.since)
    if kind == "failures" and question.templates and not question.run_id:
        return history.template_failures(engine, question.templates[0])
    if kind == "run_cost" and question.since and not (question.run_id or question.which):
        return history.spend(engine, question.since)
    if kind == "status" and question.templates and not question.run_id:
        return answer_template_status(engine, catalog, question.templates)
    if kind == "status" and not (question.run_id or question.which or followed):
        running = answer_running(engine)
        if running.data["runs"]:
            return running
    if kind == "waiting":
        return answer_waiting(engine, question, pick_run(engine, question, followed, active=True))
    run_id = pick_run(engine, question, followed)
    if run_id is None:
        return Answer("No run yet. Ask me to run something, e.g. 'run quick under $10'.",
                      {"runs": []})
    if kind == "tokens":
        return history.tokens(engine, run_id=run_id)
    if kind == "compare_runs":
        from controller.principal.compare import compare_runs

        return compare_runs(engine, run_id)
    run = get_run(engine, run_id)
    if kind == "failures":
        return answer_failures(run, question)
    if kind == "run_cost":
        return answer_cost(run)
    return Answer(_run_summary(run), {"run": run, "runs": [run_id]}, run_id)


def pick_run(engine: Engine, question: Question, followed: str | None,
             active: bool = False) -> str | None:
    """The run a question is about: its id, the last or previous one, or the followed one."""
    if question.run_id:
        return question.run_id
    if question.which == "previous":
        base = followed or latest_run_id(engine)
        return _run_before(engine, base) if base else None
    if question.which == "last" or not active:
        return followed or latest_run_id(engine)
    return None  # waiting, nothing named: every active run


def latest_run_id(engine: Engine) -> str | None:
    with engine.connect() as conn:
        row = conn.execute(select(runs.c.id).order_by(runs.c.created_at.desc()).limit(1)).first()
    return str(row.id) if row else None


def _run_before(engine: Engine, run_id: str) -> str | None:
    with engine.connect() as conn:
        created = conn.execute(select(runs.c.created_at).where(runs.c.id == run_id)).scalar()
        if created is None:
            raise NotFoundError(f"unknown run {run_id}", hint="list runs with `simplectl status`")
        row = conn.execute(select(runs.c.id).where(runs.c.created_at < created)
                           .order_by(runs.c.created_at.desc()).limit(1)).first()
    return str(row.id) if row else None


def answer_template_status(engine: Engine, catalog: Catalog,
                           templates: tuple[str, ...]) -> Answer:
    """How each template is doing: its latest sandbox."""
    lines, rows = [], []
    for template_id in templates[:10]:
        row = _latest_sandbox(engine, template_id)
        if row is None:
            lines.append(f"{template_id} has not run yet.")
            continue
        rows.append(row)
        lines.append(_sandbox_line(catalog, row))
    run_ids = [r["run_id"] for r in rows]
    return Answer("\n".join(lines), {"sandboxes": rows, "runs": list(dict.fromkeys(run_ids))},
                  run_ids[0] if len(rows) == 1 else None)


def answer_failures(run: dict[str, Any], question: Question) -> Answer:
    target = run["run_id"]
    failed = [s for s in run["sandboxes"] if s["status"] in FAILED_SANDBOX]
    if not failed:
        return Answer(f"Nothing failed in {target}. {_counts(run)}",
                      {"failed": [], "runs": [target]}, target)
    lines = [f"{len(failed)} of {len(run['sandboxes'])} failed in {target}:"]
    for s in failed[:20]:
        error = quoted(s["error"][:300]) if s["error"] else "no error recorded"
        lines.append(
            f"- {s['template_id']}: {s['status']} after {s['attempts']} attempt(s), "
            f"exit code {s['exit_code']}: {error}"
        )
    if len(failed) > 20:
        lines.append(f"... and {len(failed) - 20} more (`simplectl status {target}`)")
    return Answer("\n".join(lines), {"failed": failed, "runs": [target]}, target)


def answer_cost(run: dict[str, Any]) -> Answer:
    target = run["run_id"]
    spent = round(sum(s["cost_usd"] for s in run["sandboxes"]), 2)
    used = sum(s["tokens"] or 0 for s in run["sandboxes"])
    low, high = run["plan"]["estimated_cost_usd"]
    budget = f" of its ${run['budget_usd']:,.2f} budget" if run["budget_usd"] else ""
    active = sum(1 for s in run["sandboxes"] if s["status"] in ("pending", "running"))
    so_far = " so far" if run["status"] in ACTIVE_RUN else ""
    text = (
        f"{target} has cost ${spent:,.2f}{so_far}{budget} (estimate ${low:,.2f}-{high:,.2f}; "
        f"{used:,} tokens); it is {run['status']}"
        + (f", {active} sandboxes still to finish." if active else ".")
    )
    return Answer(text, {"run_id": target, "cost_usd": spent, "tokens": used,
                         "status": run["status"], "budget_usd": run["budget_usd"],
                         "estimated_cost_usd": [low, high], "runs": [target]}, target)


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
    ids = [r["run_id"] for r in active]
    return Answer("\n".join(lines), {"runs": ids, "details": details},
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
        f"{minutes(template.runtime_s[1])} at most)"
        if template else ""
    )
    step = f", step {s['step']}/{s['steps_total']}" if s["step"] is not None else ""
    elapsed = ""
    if s["started_at"]:
        end = datetime.fromisoformat(s["finished_at"]) if s["finished_at"] else datetime.now(UTC)
        elapsed = f", {minutes((end - datetime.fromisoformat(s['started_at'])).total_seconds())}"
        elapsed += " so far" if not s["finished_at"] else " in all"
    error = f"; last error: {quoted(s['error'][:200])}" if s["error"] else ""
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


def minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"

