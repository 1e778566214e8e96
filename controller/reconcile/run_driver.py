"""Driving one active run within a pass: cost alerts, the budget, launches, the end.

Per run and pass: mark a pending run running, raise cost alerts, stop everything on a
cancel or a spent budget, launch pending sandboxes (of the stage whose turn it is) into
free slots, and finish the run once nothing of it waits or runs.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select, update

from controller import metrics
from controller.attempts.exit_path import ExitPath
from controller.attempts.launcher import Launcher
from controller.attempts.outcomes import run_outcome
from controller.backends.base import Backend
from controller.catalog.stages import stages_from_plan
from controller.db.schema import runs, sandboxes
from controller.reconcile.alerts import raise_cost_alerts
from controller.reconcile.pass_reads import Running, alert_candidates, pending_page, running_rows
from controller.reconcile.staging import launchable_stage, staged_outcome
from controller.reconcile.stopping import Stopper
from controller.settings import Settings
from controller.states import ACTIVE_RUN, RunStatus, SandboxStatus, StopReason
from controller.store.base import ObjectStore

logger = logging.getLogger(__name__)

# Pending sandboxes read at a time when looking for ones to launch: twice the free slots
# (some may be skipped: a retry not due yet, the expensive limit), within these bounds.
PENDING_PAGE_MIN = 8
PENDING_PAGE_MAX = 256
ALERT_LOOKBACK_S = 60.0  # ended sandboxes' costs checked against estimates for this long


@dataclass
class RunDriver:
    """Moves each active run on by one pass: alerts, budget, launches, its end. Its parts
    are the `Reconciler`'s."""

    engine: Engine
    backend: Backend
    store: ObjectStore
    settings: Settings
    clock: Callable[[], datetime]
    rng: random.Random
    launcher: Launcher
    stopper: Stopper
    exits: ExitPath
    background: Executor  # where launches start

    def drive(self, run: Any, running: Running) -> None:
        """One pass over `run`, whose running sandboxes `running` counts (or lists)."""
        if run.status == RunStatus.PENDING:
            self._set_run(run.id, status=RunStatus.RUNNING, started_at=self.clock())
        now = self.clock()
        with self.engine.connect() as conn:
            candidates = alert_candidates(conn, run.id, now - timedelta(seconds=ALERT_LOOKBACK_S))
        held = raise_cost_alerts(
            self.engine, run, candidates, self.settings.cost_alert_ratio, now
        )
        if run.cancel_requested:
            self._skip_pending(run.id, "cancelled before it started")
        else:
            spent = self._spent(run.id) if run.budget_usd is not None else 0.0
            if self._over_budget(run, running, spent):
                return
            staged = self._members(run.id) if stages_from_plan(run.plan) else []
            stage = launchable_stage(self.engine, self.store, run, staged, now)
            if not held:
                self._launch_ready(run, running, spent, stage)
        if not running.count:  # with one running it cannot end; its exit nudges a new pass
            self._maybe_finish_run(run)

    def _members(self, run_id: str) -> list[Any]:
        """Every sandbox of a staged run: id, status and stage only."""
        with self.engine.connect() as conn:
            return list(
                conn.execute(
                    select(sandboxes.c.id, sandboxes.c.status, sandboxes.c.stage).where(
                        sandboxes.c.run_id == run_id
                    )
                ).all()
            )

    def _spent(self, run_id: str) -> float:
        """What the run's sandboxes reported spending so far, every attempt."""
        with self.engine.connect() as conn:
            total = conn.execute(
                select(func.sum(sandboxes.c.cost_usd + sandboxes.c.prior_cost_usd)).where(
                    sandboxes.c.run_id == run_id
                )
            ).scalar()
        return float(total or 0.0)

    def _over_budget(self, run: Any, running: Running, spent: float) -> bool:
        """Past the budget: stop what runs, skip what waits. The run ends budget_exceeded."""
        if run.budget_usd is None or spent < run.budget_usd:
            return False
        if running.rows is not None:
            rows: Sequence[Any] = running.rows
        else:  # a pass that only counted them
            with self.engine.connect() as conn:
                rows = running_rows(conn, [run.id])
        for row in rows:
            if row.stop_reason is None:
                self.stopper.stop(row, StopReason.BUDGET)
        self._skip_pending(run.id, f"budget: ${spent:.2f} spent of ${run.budget_usd:.2f}")
        self._set_run(run.id, error=f"budget exceeded: ${spent:.2f} of ${run.budget_usd:.2f}")
        self._maybe_finish_run(run)
        return True

    def _launch_ready(
        self, run: Any, running: Running, spent: float, stage: int | None = None
    ) -> None:
        now = self.clock()
        slots = run.max_parallel - running.count
        expensive_limit = run.plan.get("max_parallel_expensive")
        expensive_running = running.expensive
        picked: list[Any] = []
        for row in self._pending(run.id, slots, stage):
            if len(picked) >= slots:
                break
            if row.next_attempt_at and row.next_attempt_at > now:
                continue
            if row.expensive and expensive_limit and expensive_running >= expensive_limit:
                continue
            if run.budget_usd is not None and self._would_pass_budget(run, row, spent):
                continue
            picked.append(row)
            expensive_running += int(row.expensive)
        # Claimed here, so the next pass counts them; started in the background, because a
        # container start waits ~100 ms on the engine and exits must not wait behind it.
        for claim in self.launcher.claim_many(run, picked, now) if picked else []:
            self.background.submit(self.launcher.start, claim, now, self.rng)

    def _pending(self, run_id: str, slots: int, stage: int | None) -> Iterator[Any]:
        """The run's pending sandboxes (of `stage`, if staged) in launch order, a page at a
        time."""
        page = min(max(2 * slots, PENDING_PAGE_MIN), PENDING_PAGE_MAX)
        after = -1
        while slots > 0:
            with self.engine.connect() as conn:
                rows = pending_page(conn, run_id, after, page, stage)
            yield from rows
            if len(rows) < page:
                return
            after = rows[-1].position

    def _would_pass_budget(self, run: Any, row: Any, spent: float) -> bool:
        low = float(row.spec.get("estimate_min_usd", 0.0))
        if spent + low <= run.budget_usd:
            return False
        self._skip(
            row.id,
            f"budget: ${spent:.2f} spent, its minimum estimate ${low:.2f} "
            f"would pass the ${run.budget_usd:.2f} budget",
        )
        self._set_run(run.id, error="budget exceeded")
        return True

    def _skip_pending(self, run_id: str, reason: str) -> None:
        with self.engine.begin() as conn:
            skipped = conn.execute(
                update(sandboxes)
                .where(sandboxes.c.run_id == run_id, sandboxes.c.status == SandboxStatus.PENDING)
                .values(status=SandboxStatus.SKIPPED, error=reason, finished_at=self.clock())
            ).rowcount
        if skipped:
            metrics.SANDBOX_ENDS.labels(SandboxStatus.SKIPPED.value, self.backend.name).inc(skipped)
            logger.info("skipped %d sandbox(es) of run %s: %s", skipped, run_id, reason)

    def _skip(self, sandbox_id: str, reason: str) -> None:
        with self.engine.begin() as conn:
            skipped = conn.execute(
                update(sandboxes)
                .where(sandboxes.c.id == sandbox_id, sandboxes.c.status == SandboxStatus.PENDING)
                .values(status=SandboxStatus.SKIPPED, error=reason, finished_at=self.clock())
            ).rowcount
        if skipped:
            metrics.SANDBOX_ENDS.labels(SandboxStatus.SKIPPED.value, self.backend.name).inc()
        logger.info("skipped sandbox %s: %s", sandbox_id, reason, extra={"sandbox_id": sandbox_id})

    def _maybe_finish_run(self, run: Any) -> None:
        with self.engine.connect() as conn:
            fresh = conn.execute(
                select(runs.c.status, runs.c.cancel_requested, runs.c.error).where(
                    runs.c.id == run.id
                )
            ).one()
            statuses = list(
                conn.execute(
                    select(sandboxes.c.status)
                    .where(sandboxes.c.run_id == run.id)
                    .group_by(sandboxes.c.status)
                ).scalars()
            )
        if fresh.status not in ACTIVE_RUN:
            return
        if any(s in (SandboxStatus.PENDING, SandboxStatus.RUNNING) for s in statuses):
            return
        if self.exits.cleaning(run.id):  # it ends once every sandbox is archived and removed
            return
        stages = stages_from_plan(run.plan)
        members = self._members(run.id) if stages else []
        status = run_outcome(
            fresh.cancel_requested,
            fresh.error,
            statuses,
            staged_ok=staged_outcome(stages, members) if stages else None,
        )
        self._set_run(run.id, status=status, finished_at=self.clock())
        logger.info("run %s finished: %s", run.id, status.value)

    def _set_run(self, run_id: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(runs).where(runs.c.id == run_id).values(**values))
