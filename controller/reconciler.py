"""The reconciler: level-triggered, it compares what the database wants with what
the backend reports, by label, and acts on the difference.

Each pass: follow running sandboxes (exit, timeout, cancel, lost), clean up
what no run wants, then per active run stop on budget, launch pending
sandboxes up to the run's parallelism, and finish the run when nothing is
left. Nothing is kept in memory between passes, so a restarted controller
picks up where the last one stopped and adopts what still runs.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select, update

from controller import metrics
from controller.alerts import raise_cost_alerts
from controller.backends.base import Backend, Observed, ObservedState
from controller.db.schema import runs, sandboxes
from controller.errors import SimpleError
from controller.exit_path import ExitPath
from controller.finisher import Outcome, archive_logs
from controller.launcher import Launcher
from controller.logs import log_context
from controller.settings import Settings
from controller.stages import stages_from_plan
from controller.staging import launchable_stage, staged_outcome
from controller.states import ACTIVE_RUN, RunStatus, SandboxStatus, StopReason
from controller.store.base import ObjectStore

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]
BACKGROUND_WORKERS = 16
RESTOP_AFTER_S = 10.0  # a stop that did not take (e.g. sent before the start) is sent again


def utcnow() -> datetime:
    return datetime.now(UTC)


class Reconciler:
    """Drives every active run towards its end; one background thread."""

    def __init__(
        self,
        engine: Engine,
        backend: Backend,
        store: ObjectStore,
        settings: Settings,
        clock: Clock = utcnow,
        rng: random.Random | None = None,
    ) -> None:
        self.engine, self.backend, self.store, self.settings = engine, backend, store, settings
        self.clock = clock
        self.rng = rng or random.Random()
        self.launcher = Launcher(engine, backend, store, settings)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._background = ThreadPoolExecutor(BACKGROUND_WORKERS, thread_name_prefix="backend")
        self._stop_sent: dict[tuple[str, int], float] = {}
        self.exits = ExitPath(engine, backend, store, settings, clock, self.rng, self.kick)
        backend.listen_for_exits(self._pushed_exit)
        self.passes = 0

    def kick(self) -> None:
        """Ask for a pass now (a run was created, a sandbox exited, a cancel came in)."""
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="reconciler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=10)
        self._background.shutdown(wait=True)
        self.exits.shutdown()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.settings.reconcile_interval_s)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self.reconcile_once()
            except Exception:  # the loop must survive a bad pass; the next one retries
                logger.exception("reconcile pass failed; retrying")
                time.sleep(min(self.settings.reconcile_interval_s, 1.0))

    def reconcile_once(self) -> None:
        """One level-triggered pass over every active run."""
        self.passes += 1
        try:
            observed = {(o.sandbox_id, o.attempt): o for o in self.backend.observe()}
        except SimpleError:
            metrics.backend_error(self.backend, "observe")
            raise
        with self.engine.connect() as conn:
            active = conn.execute(select(runs).where(runs.c.status.in_(list(ACTIVE_RUN)))).all()
            rows = (
                conn.execute(
                    select(sandboxes)
                    .where(sandboxes.c.run_id.in_([r.id for r in active]))
                    .order_by(sandboxes.c.position)
                ).all()
                if active
                else []
            )
        wanted = {(r.id, r.attempt) for r in rows if r.status == SandboxStatus.RUNNING}
        cancelled = {r.id for r in active if r.cancel_requested}
        for row in rows:
            if row.status == SandboxStatus.RUNNING:
                with log_context(run_id=row.run_id, sandbox_id=row.id, attempt=row.attempt):
                    self._follow(row, observed.get((row.id, row.attempt)), row.run_id in cancelled)
        self._collect_garbage(observed, wanted)
        for run in active:
            self._drive_run(run)

    def _follow(self, row: Any, seen: Observed | None, cancel: bool) -> None:
        if self.exits.finishing(row.id, row.attempt):
            return
        now = self.clock()
        if seen is None:
            if row.stop_reason is not None:  # stopping it may remove it (a deleted Job)
                gone = Observed(row.id, row.run_id, row.attempt, ObservedState.EXITED)
                self._finish(row, classify(row, gone))
            elif row.launched_at and now - row.launched_at > self._lost_grace:
                self._finish(row, Outcome(SandboxStatus.LOST, None, "the sandbox vanished"))
            return
        if seen.state == ObservedState.EXITED:
            self._finish(row, exit_outcome(row, seen))
            return
        if row.stop_reason is None:
            if cancel:
                self._stop(row, StopReason.CANCELLED)
            elif row.launched_at and now - row.launched_at > timedelta(
                seconds=row.spec["timeout_s"]
            ):
                self._stop(row, StopReason.TIMEOUT)
        elif time.monotonic() - self._stop_sent.get((row.id, row.attempt), 0.0) > RESTOP_AFTER_S:
            self._send_stop(row)  # still running: the first stop came before its start

    @property
    def _lost_grace(self) -> timedelta:
        return timedelta(seconds=self.settings.lost_grace_s)

    def _stop(self, row: Any, reason: StopReason) -> None:
        # Archive the output first: on some backends stopping deletes it with the sandbox.
        log_key = archive_logs(self.backend, self.store, row)
        with self.engine.begin() as conn:
            conn.execute(
                update(sandboxes)
                .where(sandboxes.c.id == row.id, sandboxes.c.attempt == row.attempt)
                .values(stop_reason=reason, log_key=log_key or row.log_key)
            )
        logger.info("stopping sandbox %s: %s", row.id, reason.value)
        self._send_stop(row)

    def _send_stop(self, row: Any) -> None:
        """Stop in the background: a graceful stop may take seconds."""
        self._stop_sent[(row.id, row.attempt)] = time.monotonic()
        self._background.submit(self._stop_now, row.id)

    def _stop_now(self, sandbox_id: str) -> None:
        try:
            self.backend.stop(sandbox_id)
        except SimpleError as e:
            metrics.backend_error(self.backend, "stop")
            logger.warning("could not stop sandbox %s (will retry): %s", sandbox_id, e)

    def _finish(self, row: Any, outcome: Outcome) -> None:
        self._stop_sent.pop((row.id, row.attempt), None)
        self.exits.finish((row.id, row.attempt), lambda: (row, outcome))

    def _pushed_exit(self, seen: Observed) -> None:
        """An exit the backend pushed (e.g. Docker's `die` event): record it now, no pass."""
        self.exits.finish((seen.sandbox_id, seen.attempt), lambda: self._ending(seen))

    def _ending(self, seen: Observed) -> tuple[Any, Outcome] | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(sandboxes).where(
                    sandboxes.c.id == seen.sandbox_id,
                    sandboxes.c.attempt == seen.attempt,
                    sandboxes.c.status == SandboxStatus.RUNNING,
                )
            ).first()
        if row is None:  # not ours, already recorded, or a later attempt runs
            return None
        self._stop_sent.pop((row.id, row.attempt), None)
        return row, exit_outcome(row, seen)

    def _collect_garbage(
        self, observed: dict[tuple[str, int], Observed], wanted: set[tuple[str, int]]
    ) -> None:
        """Stop and remove what this controller started and no active run wants."""
        for key, seen in observed.items():
            if key in wanted or self.exits.cleaning_sandbox(seen.sandbox_id):
                continue
            if not self._ours(seen):
                continue
            logger.info(
                "removing sandbox %s attempt %d: no active run wants it",
                seen.sandbox_id,
                seen.attempt,
            )
            try:
                if seen.state != ObservedState.EXITED:
                    self.backend.stop(seen.sandbox_id)
                self.backend.remove(seen.sandbox_id)
            except SimpleError as e:
                metrics.backend_error(self.backend, "remove")
                logger.warning("could not remove sandbox %s: %s", seen.sandbox_id, e)

    def _ours(self, seen: Observed) -> bool:
        """Launched by this controller (its label), or of a run its database knows."""
        if seen.controller_id is not None:
            return seen.controller_id == self.settings.controller_id
        with self.engine.connect() as conn:
            known = conn.execute(select(runs.c.id).where(runs.c.id == seen.run_id)).first()
        return known is not None

    def _drive_run(self, run: Any) -> None:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(sandboxes).where(sandboxes.c.run_id == run.id).order_by(sandboxes.c.position)
            ).all()
        if run.status == RunStatus.PENDING:
            self._set_run(run.id, status=RunStatus.RUNNING, started_at=self.clock())
        held = raise_cost_alerts(
            self.engine, run, rows, self.settings.cost_alert_ratio, self.clock()
        )
        if run.cancel_requested:
            self._skip_pending(rows, "cancelled before it started")
        elif self._over_budget(run, rows):
            return
        else:
            stage = launchable_stage(self.engine, self.store, run, rows, self.clock())
            if not held:
                self._launch_ready(run, rows, stage)
        self._maybe_finish_run(run)

    def _over_budget(self, run: Any, rows: Sequence[Any]) -> bool:
        """Past the budget: stop what runs, skip what waits. The run ends budget_exceeded."""
        if run.budget_usd is None:
            return False
        spent = sum(r.cost_usd + r.prior_cost_usd for r in rows)
        if spent < run.budget_usd:
            return False
        for row in rows:
            if row.status == SandboxStatus.RUNNING and row.stop_reason is None:
                self._stop(row, StopReason.BUDGET)
        self._skip_pending(rows, f"budget: ${spent:.2f} spent of ${run.budget_usd:.2f}")
        self._set_run(run.id, error=f"budget exceeded: ${spent:.2f} of ${run.budget_usd:.2f}")
        self._maybe_finish_run(run)
        return True

    def _launch_ready(self, run: Any, rows: Sequence[Any], stage: int | None = None) -> None:
        now = self.clock()
        running = [r for r in rows if r.status == SandboxStatus.RUNNING]
        slots = run.max_parallel - len(running)
        expensive_limit = run.plan.get("max_parallel_expensive")
        expensive_running = sum(1 for r in running if r.expensive)
        spent = sum(r.cost_usd + r.prior_cost_usd for r in rows)
        picked: list[Any] = []
        for row in rows:
            if len(picked) >= slots:
                break
            if row.status != SandboxStatus.PENDING:
                continue
            if stage is not None and row.stage != stage:
                continue
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
        for row in picked:
            claim = self.launcher.claim(run, row, now)
            if claim is not None:
                self._background.submit(self.launcher.start, claim, now, self.rng)

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

    def _skip_pending(self, rows: Sequence[Any], reason: str) -> None:
        for row in rows:
            if row.status == SandboxStatus.PENDING:
                self._skip(row.id, reason)

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
            fresh = conn.execute(select(runs).where(runs.c.id == run.id)).one()
            members = conn.execute(
                select(sandboxes.c.status, sandboxes.c.stage).where(sandboxes.c.run_id == run.id)
            ).all()
        statuses = [r.status for r in members]
        if fresh.status not in ACTIVE_RUN:
            return
        if any(s in (SandboxStatus.PENDING, SandboxStatus.RUNNING) for s in statuses):
            return
        if self.exits.cleaning(run.id):  # it ends once every sandbox is archived and removed
            return
        stages = stages_from_plan(fresh.plan)
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


def exit_outcome(row: Any, seen: Observed) -> Outcome:
    """How an exited sandbox ended, with when the backend saw it end."""
    outcome = classify(row, seen)
    if seen.exited_at is not None:
        outcome = replace(outcome, exited_at=datetime.fromtimestamp(seen.exited_at, UTC))
    return outcome


def classify(row: Any, seen: Observed) -> Outcome:
    """How an exited sandbox ended, from the engine's state and why we stopped it."""
    if seen.oom_killed:
        return Outcome(
            SandboxStatus.OOM,
            seen.exit_code,
            f"killed: out of memory (limit {row.spec['resources'].get('memory')})",
        )
    if row.stop_reason == StopReason.TIMEOUT or seen.deadline_exceeded:
        return Outcome(
            SandboxStatus.TIMEOUT, seen.exit_code, f"timed out after {row.spec['timeout_s']} s"
        )
    if row.stop_reason == StopReason.CANCELLED:
        return Outcome(SandboxStatus.CANCELLED, seen.exit_code, "cancelled")
    if row.stop_reason == StopReason.BUDGET:
        return Outcome(SandboxStatus.CANCELLED, seen.exit_code, "stopped: run budget exceeded")
    if seen.exit_code == 0:
        return Outcome(SandboxStatus.SUCCEEDED, 0, None)
    if seen.reason:
        return Outcome(SandboxStatus.FAILED, seen.exit_code, seen.reason)
    error = row.error or f"exited with code {seen.exit_code}"
    return Outcome(SandboxStatus.FAILED, seen.exit_code, error, transient=bool(row.transient))


def run_outcome(
    cancelled: bool, error: str | None, statuses: list[str], staged_ok: bool | None = None
) -> RunStatus:
    """A finished run's status from its sandboxes' (a staged run's: from its policies)."""
    if cancelled:
        return RunStatus.CANCELLED
    if error and error.startswith("budget"):
        return RunStatus.BUDGET_EXCEEDED
    if staged_ok is not None:
        return RunStatus.SUCCEEDED if staged_ok else RunStatus.FAILED
    if statuses and all(s == SandboxStatus.SUCCEEDED for s in statuses):
        return RunStatus.SUCCEEDED
    return RunStatus.FAILED
