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
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select, update

from controller import metrics
from controller.attempts.exit_path import ExitPath
from controller.attempts.finisher import Finisher, Outcome, archive_logs
from controller.attempts.launcher import Launcher
from controller.attempts.outcomes import classify, exit_outcome, run_outcome
from controller.attempts.urls import AttemptUrls
from controller.backends.base import Backend, Observed, ObservedState
from controller.catalog.stages import stages_from_plan
from controller.db.schema import runs, sandboxes
from controller.errors import SimpleError
from controller.intake.tokens import Signer
from controller.logs import log_context
from controller.reconcile.alerts import raise_cost_alerts
from controller.reconcile.pass_reads import (
    NONE_RUNNING,
    Running,
    active_runs,
    alert_candidates,
    pending_page,
    running_by_run,
    running_counts,
    running_rows,
)
from controller.reconcile.staging import launchable_stage, staged_outcome
from controller.settings import Settings
from controller.states import ACTIVE_RUN, RunStatus, SandboxStatus, StopReason
from controller.store.base import ObjectStore

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]
BACKGROUND_WORKERS = 16
RESTOP_AFTER_S = 10.0  # a stop that did not take (e.g. sent before the start) is sent again
# Pending sandboxes read at a time when looking for ones to launch: twice the free slots
# (some may be skipped: a retry not due yet, the expensive limit), within these bounds.
PENDING_PAGE_MIN = 8
PENDING_PAGE_MAX = 256
ALERT_LOOKBACK_S = 60.0  # ended sandboxes' costs checked against estimates for this long
PASS_HISTORY = 10_000  # durations of the latest passes kept (benches, metrics)


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
        urls: AttemptUrls | None = None,
        finisher: Finisher | None = None,
    ) -> None:
        self.engine, self.backend, self.store, self.settings = engine, backend, store, settings
        self.clock = clock
        self.rng = rng or random.Random()
        # A controller passes its own; a reconciler made alone signs with a key of its own.
        urls = urls or AttemptUrls(store, Signer.ephemeral(), settings.resolved_controller_url)
        finisher = finisher or Finisher(engine, backend, store, settings)
        self.launcher = Launcher(engine, backend, store, settings, urls, finisher)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._background = ThreadPoolExecutor(BACKGROUND_WORKERS, thread_name_prefix="backend")
        self._stop_sent: dict[tuple[str, int], float] = {}
        self._full_due = threading.Event()
        self._stops_under_way: set[tuple[str, int]] = set()  # attempts being stopped
        self._last_full = 0.0
        self.exits = ExitPath(finisher, clock, self.rng, self._nudge)
        backend.listen_for_exits(self._pushed_exit)
        self.passes = 0
        self.pass_seconds: deque[float] = deque(maxlen=PASS_HISTORY)

    def kick(self) -> None:
        """Ask for a full pass now (a run was created, a cancel came in, the backend asks)."""
        self._full_due.set()
        self._wake.set()

    def _nudge(self) -> None:
        """Ask for a pass that launches into freed slots, without asking the backend what
        it runs: the exit path just recorded an end (full passes still come each interval)."""
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
            interval = self.settings.reconcile_interval_s
            full = self._full_due.is_set() or time.monotonic() - self._last_full >= interval
            if full:
                self._full_due.clear()
                self._last_full = time.monotonic()
            try:
                self.reconcile_once(full=full)
            except Exception:  # the loop must survive a bad pass; the next one retries
                logger.exception("reconcile pass failed; retrying")
                time.sleep(min(self.settings.reconcile_interval_s, 1.0))

    def reconcile_once(self, full: bool = True) -> None:
        """One level-triggered pass over every active run.

        It reads only what it acts on: the running sandboxes, per run a tally by
        status and the next pending ones, so a pass stays fast with thousands of sandboxes.
        A pass that is not `full` skips the backend (following, garbage): it only launches.
        """
        began = time.perf_counter()
        self.passes += 1
        try:
            observed = (
                {(o.sandbox_id, o.attempt): o for o in self.backend.observe()} if full else {}
            )
        except SimpleError:
            metrics.backend_error(self.backend, "observe")
            raise
        with self.engine.connect() as conn:
            active = active_runs(conn)
            ids = [r.id for r in active]
            # A full pass follows every running sandbox; one that only launches counts them.
            rows = running_rows(conn, ids) if full else []
            running = running_by_run(rows) if full else running_counts(conn, ids)
        if full:
            cancelled = {r.id for r in active if r.cancel_requested}
            for row in rows:
                with log_context(run_id=row.run_id, sandbox_id=row.id, attempt=row.attempt):
                    self._follow(row, observed.get((row.id, row.attempt)), row.run_id in cancelled)
            self._collect_garbage(observed, {(r.id, r.attempt) for r in rows})
        for run in active:
            self._drive_run(run, running.get(run.id, NONE_RUNNING))
        self.pass_seconds.append(time.perf_counter() - began)

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
        """Stop the attempt in the background, every one at once: archiving its output and
        a graceful stop take a while each, and a cancelled run has many to stop."""
        key = (row.id, row.attempt)
        if key in self._stops_under_way:  # its stop reason is not committed yet
            return
        self._stops_under_way.add(key)
        self._stop_sent[key] = time.monotonic()
        self._background.submit(self._archive_and_stop, row, reason)

    def _archive_and_stop(self, row: Any, reason: StopReason) -> None:
        try:
            # Archive the output first where stopping deletes it with the sandbox; elsewhere
            # it is archived after the exit, and the stop goes out at once.
            log_key = (
                archive_logs(self.backend, self.store, row)
                if self.backend.stop_removes_output
                else None
            )
            with self.engine.begin() as conn:
                conn.execute(
                    update(sandboxes)
                    .where(sandboxes.c.id == row.id, sandboxes.c.attempt == row.attempt)
                    .values(stop_reason=reason, log_key=log_key or row.log_key)
                )
            logger.info("stopping sandbox %s: %s", row.id, reason.value)
            self._stop_now(row.id)
        except Exception:  # the next pass sees no stop reason and tries again
            logger.exception("stopping sandbox %s failed; will retry", row.id)
        finally:
            self._stops_under_way.discard((row.id, row.attempt))

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

    def _drive_run(self, run: Any, running: Running) -> None:
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
                self._stop(row, StopReason.BUDGET)
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
            self._background.submit(self.launcher.start, claim, now, self.rng)

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
