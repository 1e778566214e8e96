"""The reconciler: level-triggered, it compares what the database wants with what
the backend reports, by label, and acts on the difference.

Each pass: follow running sandboxes (exit, timeout, cancel, lost), clean up
what no run wants, then per active run stop on budget, launch pending
sandboxes up to the run's parallelism, and finish the run when nothing is
left (`run_driver`). Stops go out through `stopping`. Nothing is kept in memory
between passes, so a restarted controller picks up where the last one stopped
and adopts what still runs.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select

from controller import metrics
from controller.attempts.exit_path import ExitPath
from controller.attempts.finisher import Finisher, Outcome
from controller.attempts.launcher import Launcher
from controller.attempts.outcomes import classify, exit_outcome
from controller.attempts.urls import AttemptUrls
from controller.backends.base import Backend, Observed, ObservedState
from controller.db.schema import runs, sandboxes
from controller.errors import FencedError, SimpleError
from controller.intake.tokens import Signer
from controller.leader.elector import Leadership, SoleLeader
from controller.logs import log_context
from controller.reconcile.daily_gc import DailyGc
from controller.reconcile.pass_reads import (
    NONE_RUNNING,
    active_runs,
    running_by_run,
    running_counts,
    running_rows,
)
from controller.reconcile.run_driver import RunDriver
from controller.reconcile.stopping import Stopper
from controller.settings import Settings
from controller.states import SandboxStatus, StopReason
from controller.store.base import ObjectStore

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]
BACKGROUND_WORKERS = 16
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
        background: Executor | None = None,
        urls: AttemptUrls | None = None,
        finisher: Finisher | None = None,
        leadership: Leadership | None = None,
    ) -> None:
        """`background` runs launches and stops (a thread pool unless given: tests pass
        one that runs them at once); passes run only while `leadership` leads."""
        self.engine, self.backend, self.store, self.settings = engine, backend, store, settings
        self.leadership = leadership or SoleLeader("reconciler")
        self.clock = clock
        self.rng = rng or random.Random()
        # A controller passes its own; a reconciler made alone signs with a key of its own.
        urls = urls or AttemptUrls(store, Signer.ephemeral(), settings.resolved_controller_url)
        finisher = finisher or Finisher(engine, backend, store, settings)
        self.launcher = Launcher(engine, backend, store, settings, urls, finisher)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        if background is None:
            background = ThreadPoolExecutor(BACKGROUND_WORKERS, thread_name_prefix="backend")
        self._background = background
        self._full_due = threading.Event()
        self._last_full = 0.0
        self.stopper = Stopper(engine, backend, store, background)
        self.exits = ExitPath(finisher, clock, self.rng, self._nudge)
        self.run_driver = RunDriver(
            engine=engine, backend=backend, store=store, settings=settings, clock=clock,
            rng=self.rng, launcher=self.launcher, stopper=self.stopper, exits=self.exits,
            background=background,
        )
        backend.listen_for_exits(self._pushed_exit)
        self.daily_gc = DailyGc(engine, store, settings, clock, background)
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
        self.daily_gc.stop()
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
            if not self.leadership.leading():  # a standby: it passes once it leads
                self._full_due.set()  # and then its first pass adopts what runs
                continue
            interval = self.settings.reconcile_interval_s
            full = self._full_due.is_set() or time.monotonic() - self._last_full >= interval
            if full:
                self._full_due.clear()
                self._last_full = time.monotonic()
            try:
                self.reconcile_once(full=full)
            except FencedError as e:  # another leads now: stand by (the fence stepped down)
                logger.warning("pass stopped: %s", e)
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
            self.daily_gc.maybe_start()  # retention, once a day (in the background)
        for run in active:
            self.run_driver.drive(run, running.get(run.id, NONE_RUNNING))
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
                self.stopper.stop(row, StopReason.CANCELLED)
            elif row.launched_at and now - row.launched_at > timedelta(
                seconds=row.spec["timeout_s"]
            ):
                self.stopper.stop(row, StopReason.TIMEOUT)
        else:  # still running: the first stop may have come before its start
            self.stopper.resend_if_due(row)

    @property
    def _lost_grace(self) -> timedelta:
        return timedelta(seconds=self.settings.lost_grace_s)

    def _finish(self, row: Any, outcome: Outcome) -> None:
        self.stopper.forget(row.id, row.attempt)
        self.exits.finish((row.id, row.attempt), lambda: (row, outcome))

    def _pushed_exit(self, seen: Observed) -> None:
        """An exit the backend pushed (e.g. Docker's `die` event): record it now, no pass."""
        if not self.leadership.leading():  # the leader records it (a standby only watches)
            return
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
        self.stopper.forget(row.id, row.attempt)
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
