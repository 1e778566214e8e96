"""Sandboxes marked running straight in the database, each with its token: for tests of the
sandbox routes on a controller with no reconciler (nothing is launched)."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine, insert

from controller.db.schema import attempts, runs, sandboxes
from controller.intake.tokens import hash_token


def seed_running(engine: Engine, run_id: str, tokens_by_id: dict[str, str]) -> None:
    """A run whose sandboxes (id -> token) run their first attempt."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(insert(runs).values(
            id=run_id, status="running", backend="process", request={"templates": ["t"]},
            plan={}, max_parallel=len(tokens_by_id), cancel_requested=False, created_at=now,
            started_at=now,
        ))  # fmt: skip
        conn.execute(insert(sandboxes), [
            {"id": sandbox_id, "run_id": run_id, "template_id": "t", "position": n,
             "status": "running", "spec": {"timeout_s": 60}, "attempt": 1,
             "token_hash": hash_token(token), "launched_at": now, "last_seq": 0,
             "cost_usd": 0.0, "prior_cost_usd": 0.0, "tokens": 0, "aggregated": False,
             "expensive": False}
            for n, (sandbox_id, token) in enumerate(tokens_by_id.items())
        ])  # fmt: skip
        conn.execute(insert(attempts), [
            {"sandbox_id": sandbox_id, "attempt": 1, "status": "running", "started_at": now}
            for sandbox_id in tokens_by_id
        ])
