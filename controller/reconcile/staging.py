"""Driving a staged run: which stage may launch, when the next one starts, what is skipped.

Called by the reconciler on every pass. The run's `stage` column is the stage
now launching. When every sandbox of it has ended, its policy decides: met,
the next stage's input file is written to the store and `stage` moves on;
not met, every later sandbox is skipped with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, update

from controller.catalog.stages import Stage, settle, stages_from_plan
from controller.db.schema import runs, sandboxes
from controller.errors import SimpleError
from controller.reconcile.stage_input import build_stage_input
from controller.states import SandboxStatus
from controller.store.base import ObjectStore, stage_input_key

logger = logging.getLogger(__name__)


def launchable_stage(
    engine: Engine, store: ObjectStore, run: Any, rows: Sequence[Any], now: datetime
) -> int | None:
    """The stage whose pending sandboxes may launch now; None for a flat run."""
    stages = stages_from_plan(run.plan)
    if not stages:
        return None
    current = run.stage or 0
    while current < len(stages) - 1:
        statuses = [r.status for r in rows if r.stage == current]
        result = settle(current, stages[current].policy, statuses)
        if not result.settled:
            return current
        if not result.met:
            _skip_later(engine, run.id, rows, current, result.reason or "", now)
            return current
        try:
            _start_stage(engine, store, run.id, current + 1)
        except SimpleError as e:  # the store or the database: the next pass tries again
            logger.warning("run %s: stage %d cannot start yet: %s", run.id, current + 1, e)
            return current
        current += 1
    return current


def staged_outcome(stages: Sequence[Stage], rows: Sequence[Any]) -> bool:
    """A finished staged run succeeded when every stage met its policy."""
    return all(
        settle(i, stage.policy, [r.status for r in rows if r.stage == i]).met
        for i, stage in enumerate(stages)
    )


def _start_stage(engine: Engine, store: ObjectStore, run_id: str, stage: int) -> None:
    """Write the stage's input (the previous stage's rows), then let it launch."""
    with engine.connect() as conn:
        path = build_stage_input(conn, run_id, stage)
    try:
        size = path.stat().st_size
        store.put_file(stage_input_key(run_id, stage), path)
    finally:
        path.unlink(missing_ok=True)
    with engine.begin() as conn:
        conn.execute(update(runs).where(runs.c.id == run_id).values(stage=stage))
    logger.info("run %s: stage %d starts (input %d bytes)", run_id, stage, size)


def _skip_later(
    engine: Engine, run_id: str, rows: Sequence[Any], stage: int, reason: str, now: datetime
) -> None:
    later = [r.id for r in rows if r.stage > stage and r.status == SandboxStatus.PENDING]
    if not later:
        return
    with engine.begin() as conn:
        conn.execute(
            update(sandboxes)
            .where(sandboxes.c.id.in_(later), sandboxes.c.status == SandboxStatus.PENDING)
            .values(status=SandboxStatus.SKIPPED, error=f"skipped: {reason}", finished_at=now)
        )
    logger.info("run %s: %d sandboxes skipped: %s", run_id, len(later), reason)
