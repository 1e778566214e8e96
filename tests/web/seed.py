"""Rows of a run written straight into the database: for page tests and the dashboard bench.

No sandbox runs: the run, its sandboxes, their attempts and events are inserted as the
controller would have recorded them, so a 1,000-sandbox run page costs no launches.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, insert

from controller.db.schema import attempts, events, runs, sandboxes

STATES = ("succeeded", "running", "failed", "pending", "succeeded", "running")


def seed_run(
    engine: Engine,
    run_id: str,
    count: int,
    *,
    status: str = "running",
    message: str = "agent 3 timed out",
    template_prefix: str = "tpl",
    states: tuple[str, ...] = STATES,
) -> list[str]:
    """A run of COUNT sandboxes in mixed states, with attempts (some retried) and events;
    returns the sandbox ids. `message` goes into error events and failed sandboxes."""
    now = datetime.now(UTC)
    start = now - timedelta(minutes=10)
    ids = [f"{run_id.removeprefix('run-')}-{template_prefix}-{n:04d}" for n in range(count)]
    plan = {
        "selected": [f"{template_prefix}_{n:04d}" for n in range(count)],
        "excluded": [],
        "estimated_cost_usd": [0.5 * count, 1.5 * count],
        "estimated_runtime_s": [60.0, 600.0],
        "max_parallel": min(count, 50),
        "priority": "balanced",
        "budget_usd": 2.0 * count,
    }
    sandbox_rows, attempt_rows, event_rows = [], [], []
    for n, sandbox_id in enumerate(ids):
        state = states[n % len(states)] if status == "running" else status
        launched = start + timedelta(seconds=n % 300)
        ended = state not in ("running", "pending")
        tries = 0 if state == "pending" else (2 if n % 7 == 3 else 1)
        sandbox_rows.append(
            _sandbox(run_id, sandbox_id, template_prefix, n, state, tries, launched, now, message)
        )
        for attempt in range(1, tries + 1):
            a_start = launched + timedelta(seconds=40 * (attempt - 1))
            last = attempt == tries
            attempt_rows.append(
                {
                    "sandbox_id": sandbox_id,
                    "attempt": attempt,
                    "status": state if last else "failed",
                    "error": None if last else message,
                    "cost_usd": 0.4,
                    "started_at": a_start,
                    "exited_at": a_start + timedelta(seconds=30) if ended or not last else None,
                    "finished_at": a_start + timedelta(seconds=31) if ended or not last else None,
                }
            )
        event_rows.extend(_events(run_id, sandbox_id, tries, launched, message))
    with engine.begin() as conn:
        conn.execute(insert(runs).values(_run(run_id, status, plan, start, now, count)))
        conn.execute(insert(sandboxes), sandbox_rows)
        if attempt_rows:
            conn.execute(insert(attempts), attempt_rows)
        if event_rows:
            conn.execute(insert(events), event_rows)
    return ids


def _run(
    run_id: str, status: str, plan: dict[str, Any], start: datetime, now: datetime, count: int
) -> dict[str, Any]:
    return {
        "id": run_id,
        "status": status,
        "backend": "process",
        "request": {"names": ["seeded"]},
        "plan": plan,
        "budget_usd": plan["budget_usd"],
        "max_parallel": plan["max_parallel"],
        "cancel_requested": False,
        "created_at": start,
        "started_at": start,
        "finished_at": None if status in ("running", "pending") else now,
    }


def _sandbox(
    run_id: str,
    sandbox_id: str,
    prefix: str,
    n: int,
    state: str,
    tries: int,
    launched: datetime,
    now: datetime,
    message: str,
) -> dict[str, Any]:
    ended = state not in ("running", "pending")
    return {
        "id": sandbox_id,
        "run_id": run_id,
        "template_id": f"{prefix}_{n:04d}",
        "position": n,
        "status": state,
        "spec": {"config": {}},
        "attempt": tries,
        "last_seq": 3 if tries else 0,
        "step": 3 if tries else None,
        "steps_total": 7 if tries else None,
        "cost_usd": 0.4 * tries,
        "prior_cost_usd": 0.0,
        "tokens": 1000 * tries,
        "aggregated": ended,
        "expensive": False,
        "error": message if state == "failed" else None,
        "exit_code": (0 if state == "succeeded" else 3) if ended else None,
        "launched_at": launched if tries else None,
        "started_at": launched if tries else None,
        "finished_at": min(now, launched + timedelta(seconds=70)) if ended else None,
    }


def _events(
    run_id: str, sandbox_id: str, tries: int, launched: datetime, message: str
) -> list[dict[str, Any]]:
    found = []
    kinds = [("started", {}), ("progress", {"step": 3, "steps_total": 7, "cost_usd": 0.4})]
    if tries > 1:
        kinds.append(("error", {"error": {"type": "Flaky", "message": message}}))
    for seq, (kind, data) in enumerate(kinds, start=1):
        found.append(
            {
                "sandbox_id": sandbox_id,
                "run_id": run_id,
                "event_id": f"e{seq}",
                "attempt": max(tries, 1),
                "seq": seq,
                "type": kind,
                "time": launched + timedelta(seconds=seq),
                "data": data,
                "body_hash": "0" * 64,
                "received_at": launched + timedelta(seconds=seq),
            }
        )
    return found
