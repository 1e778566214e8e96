"""The built-in sandbox runtime: `python -m sandbox_image`.

Reads the contract's environment, runs the simulation in the working directory,
reports through the event outbox, uploads the snapshot, flushes, and exits:

- 0: the workload completed and its final snapshot was uploaded;
- 1: the workload failed (after a `failed` event), or it succeeded but the final
  snapshot could not be uploaded;
- 2: the environment does not follow the contract (nothing else is done);
- 143: stopped by SIGTERM/SIGINT at a step boundary (a `failed` event with
  error type `cancelled`, the snapshot uploaded, events flushed);
- the `exit_code` hook's value, after a completed workload.

The snapshot's `runs.run_id` is the sandbox id (`SIMPLE_SANDBOX_ID`): unique,
and the same for every attempt of the sandbox. Snapshots are uploaded at
checkpoints, at every `checkpoint_every_steps`-th step unless the previous one
was less than `checkpoint_interval_s` seconds ago, and always at the end, after
the terminal event is in the outbox and before the flush. Optional, outside the
contract: `SIMPLE_FLUSH_TIMEOUT_S` (default 60) bounds the final event flush.
Logs go to stderr in a plain format (what `kubectl logs` shows).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import time
from pathlib import Path

import httpx

from sandbox_image.batch import ItemResult, ItemsError, run_items
from sandbox_image.contract import ContractError, EventType, SandboxEnv, export_template_secrets
from sandbox_image.fetch import FetchError
from sandbox_image.gather import InputError
from sandbox_image.inputs import INPUT_FETCH_BUDGET_S, Inputs, fetch_inputs
from sandbox_image.outbox import EventSender, Outbox, utc_now_iso
from sandbox_image.retry import Deadline
from sandbox_image.shutdown import ShutdownFlag
from sandbox_image.simulation import (
    Cancelled,
    Simulation,
    SimulationFailure,
    StepResult,
    Totals,
)
from sandbox_image.simulation_config import ConfigError, SimulationConfig
from sandbox_image.snapshot import (
    SNAPSHOT_FILENAME,
    RunRecord,
    SnapshotStore,
    SnapshotUploadError,
    upload_snapshot,
    write_item,
    write_run,
    write_step,
    write_world,
)

logger = logging.getLogger(__name__)

FLUSH_TIMEOUT_ENV = "SIMPLE_FLUSH_TIMEOUT_S"
DEFAULT_FLUSH_TIMEOUT_S = 60.0
FINAL_UPLOAD_BUDGET_S = 120.0
CHECKPOINT_UPLOAD_BUDGET_S = 15.0
# After SIGTERM the grace period before SIGKILL is short (30 s by default on Kubernetes).
SHUTDOWN_UPLOAD_BUDGET_S = 12.0
SHUTDOWN_FLUSH_BUDGET_S = 8.0
EXIT_OK, EXIT_FAILED, EXIT_CONTRACT, EXIT_CANCELLED = 0, 1, 2, 143


class Runtime:
    """One attempt of one sandbox: the workload, its events and its snapshot."""

    def __init__(self, env: SandboxEnv, workdir: Path, *, shutdown: ShutdownFlag,
                 flush_timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S) -> None:
        self.env = env
        self.shutdown = shutdown
        self.flush_timeout_s = flush_timeout_s
        self.store = SnapshotStore.create(workdir / SNAPSHOT_FILENAME)
        self.outbox = Outbox(self.store)
        self.config = SimulationConfig()
        self.started_at = utc_now_iso()
        self._upload_client: httpx.Client | None = None
        self._last_checkpoint: float | None = None
        self._ballast = b""
        self.inputs = Inputs()
        self._item_totals = Totals()
        self.steps_total = 0

    @property
    def run_id(self) -> str:
        """The snapshot's `runs.run_id`: the sandbox id."""
        return self.env.sandbox_id

    def run(self) -> int:
        """Run the workload, upload the final snapshot, flush events; the exit code."""
        auth = {"Authorization": f"Bearer {self.env.sandbox_token}"}
        with httpx.Client(headers=auth) as events_client, httpx.Client() as upload_client:
            self._upload_client = upload_client  # no Authorization: the URL authorises
            sender = EventSender(self.outbox, events_client, self.env.events_url)
            sender.start()
            try:
                exit_code = self._run_workload()
                exit_code = self._final_upload(exit_code)
            finally:
                self._flush(sender)
        return exit_code

    def close(self) -> None:
        """Release the SQLite file."""
        self.store.close()

    def _run_workload(self) -> int:
        try:
            self.config = SimulationConfig.from_mapping(self.env.template_config)
        except ConfigError as e:
            return self._finish_failed(
                SimulationFailure("config_error", str(e), transient=False, step=0), Totals())
        try:
            self.inputs = fetch_inputs(self.env, self.store,
                                       self._deadline(INPUT_FETCH_BUDGET_S, 0.0))
        except (FetchError, ItemsError, ConfigError, InputError) as e:
            return self._finish_failed(SimulationFailure(
                "input_error", str(e), transient=isinstance(e, FetchError), step=0), Totals())
        simulation = Simulation(self.config, seed=self.env.seed, attempt=self.env.attempt,
                                should_stop=self.shutdown.is_set)
        restored, items = self.inputs.restored, self.inputs.items
        if restored is not None:
            simulation.restore(restored.totals, restored.world or {})
        self.steps_total = self.config.steps if items is None else (
            len(items) + (restored.step if restored else 0))
        self._record_started()
        try:
            self._apply_start_hooks()
            totals = simulation.run(self) if items is None else self._run_items(simulation)
        except SimulationFailure as failure:
            return self._finish_failed(failure, simulation.totals)
        except Exception as e:
            logger.exception("the workload crashed")
            kind, message = ("oom", "out of memory (MemoryError)") if isinstance(
                e, MemoryError) else (type(e).__name__, str(e) or repr(e))
            crash = SimulationFailure(kind, message, transient=False,
                                      step=simulation.totals.steps_completed + 1)
            return self._finish_failed(crash, simulation.totals)
        finally:
            self._ballast = b""
        self._finish_completed(totals)
        return EXIT_OK if self.config.exit_code is None else self.config.exit_code

    def _run_items(self, simulation: Simulation) -> Totals:
        assert self.inputs.items is not None
        totals = self._item_totals
        run_items(self.inputs.items, self.inputs.entrypoint, self,
                  first_ordinal=totals.steps_completed + 1, should_stop=self.shutdown.is_set,
                  before=simulation.check_injected_failure)
        return totals

    def commit_item(self, ordinal: int, result: ItemResult) -> None:
        """ItemSink: the item row, a step row, the totals and a progress event, atomically."""
        totals = self._item_totals
        totals.steps_completed = ordinal
        with self.store.transaction() as conn:
            write_item(conn, result)
            write_step(conn, self.run_id, ordinal, duration_ms=result.duration_ms, actions=1,
                       failures=int(result.error is not None), cost_usd=0.0, tokens=0)
            write_run(conn, self._run_record("running", totals))
            self.outbox.append(EventType.PROGRESS, {
                "step": ordinal, "steps_total": self.steps_total, "item_id": result.item_id,
                "status": result.status, "passed": result.passed,
                "cost_usd": totals.cost_usd, "tokens": totals.tokens_used}, conn)
        self._maybe_checkpoint(ordinal)

    def _record_started(self) -> None:
        restored = self.inputs.restored
        self._item_totals = restored.totals if restored else Totals()
        with self.store.transaction() as conn:
            write_run(conn, self._run_record("running", self._item_totals))
            data: dict[str, object] = {
                "attempt": self.env.attempt, "steps_total": self.steps_total,
                "agents": self.config.agents,
                "resumed_from_step": restored.step if restored else None}
            if self.inputs.resume_error:
                data["resume_error"] = self.inputs.resume_error
            if self.inputs.items is not None:
                data["items"] = len(self.inputs.items)
            data.update(self.inputs.gathered)
            self.outbox.append(EventType.STARTED, data, conn)
        logger.info("sandbox %s started: run %s, template %s, attempt %d, seed %d, "
                    "%d agents x %d steps", self.env.sandbox_id, self.env.run_id,
                    self.env.template_id, self.env.attempt, self.env.seed,
                    self.config.agents, self.config.steps)

    def _apply_start_hooks(self) -> None:
        if self.config.memory_mb:
            # b"x" * n fills every page (memset), so the memory is resident, not just reserved.
            self._ballast = b"\x01" * (self.config.memory_mb << 20)
            logger.info("memory_mb hook: allocated and touched %d MiB", self.config.memory_mb)
        if self.config.sleep_s:
            logger.info("sleep_s hook: sleeping %.1f s", self.config.sleep_s)
            if self.shutdown.sleep(self.config.sleep_s):
                raise Cancelled(0)

    def commit_step(self, result: StepResult, totals: Totals, world: dict[str, object]) -> None:
        """StepSink: the step row, the totals, the world and its events, atomically."""
        with self.store.transaction() as conn:
            write_world(conn, result.step, world)
            write_step(conn, self.run_id, result.step, duration_ms=result.duration_ms,
                       actions=result.actions, failures=result.failures,
                       cost_usd=result.cost_usd, tokens=result.tokens)
            write_run(conn, self._run_record("running", totals))
            for error in result.errors:
                self.outbox.append(EventType.ERROR, {
                    "message": error.message, "step": result.step, "agent": error.agent_id}, conn)
            self.outbox.append(EventType.PROGRESS, {
                "step": result.step, "steps_total": self.steps_total,
                "cost_usd": totals.cost_usd, "tokens": totals.tokens_used,
                "llm_calls": totals.llm_calls}, conn)
        logger.info("step %d/%d: %d actions, %d failures, %d tokens, $%.4f (total $%.4f), "
                    "%d ms", result.step, self.steps_total, result.actions, result.failures,
                    result.tokens, result.cost_usd, totals.cost_usd, result.duration_ms)
        self._maybe_checkpoint(result.step)

    def _maybe_checkpoint(self, step: int) -> None:
        every = self.config.checkpoint_every_steps
        if not every or step % every or step == self.steps_total:
            return  # the last step's snapshot is the final one
        now = time.monotonic()
        if (self._last_checkpoint is not None
                and now - self._last_checkpoint < self.config.checkpoint_interval_s):
            logger.info("checkpoint at step %d skipped: the last one was %.1f s ago", step,
                        now - self._last_checkpoint)
            return
        self._last_checkpoint = now
        deadline = self._deadline(CHECKPOINT_UPLOAD_BUDGET_S, 0.0)
        self._upload(f"checkpoint (step {step})", deadline)

    def _finish_completed(self, totals: Totals) -> None:
        with self.store.transaction() as conn:
            record = self._run_record("completed", totals, finished=True)
            write_run(conn, record)
            self.outbox.append(EventType.COMPLETED, {
                "steps_completed": totals.steps_completed, "cost_usd": totals.cost_usd,
                "tokens_used": totals.tokens_used, "llm_calls": totals.llm_calls,
                "entities_created": totals.entities_created,
                "timepoints_created": totals.timepoints_created,
                "mechanisms_used": list(record.mechanisms)}, conn)
        logger.info("workload completed: %d steps, $%.4f, %d tokens, %d LLM calls",
                    totals.steps_completed, totals.cost_usd, totals.tokens_used,
                    totals.llm_calls)

    def _finish_failed(self, failure: SimulationFailure, totals: Totals) -> int:
        with self.store.transaction() as conn:
            write_run(conn, self._run_record("failed", totals, finished=True))
            self.outbox.append(EventType.FAILED, {
                "error": {"type": failure.error_type, "message": failure.message,
                          "transient": failure.transient},
                "step": failure.step}, conn)
        if isinstance(failure, Cancelled):
            logger.warning("stopped by %s after step %d", self.shutdown.signal_name,
                           failure.step)
            return EXIT_CANCELLED
        logger.error("workload failed at step %d: %s: %s (transient: %s)", failure.step,
                     failure.error_type, failure.message, failure.transient)
        return EXIT_FAILED

    def _run_record(self, status: str, totals: Totals, finished: bool = False) -> RunRecord:
        return RunRecord(
            run_id=self.run_id, template_id=self.env.template_id, status=status,
            started_at=self.started_at, finished_at=utc_now_iso() if finished else None,
            cost_usd=totals.cost_usd, tokens_used=totals.tokens_used,
            llm_calls=totals.llm_calls, entities_created=totals.entities_created,
            timepoints_created=totals.timepoints_created, mechanisms=self.config.mechanisms,
        )

    def _deadline(self, budget_s: float, shutdown_budget_s: float) -> Deadline:
        return Deadline(budget_s, self.shutdown.is_set, shutdown_budget_s)

    def _final_upload(self, exit_code: int) -> int:
        deadline = self._deadline(FINAL_UPLOAD_BUDGET_S, SHUTDOWN_UPLOAD_BUDGET_S)
        if self._upload("final", deadline) or exit_code != EXIT_OK:
            return exit_code
        logger.error("exiting %d although the workload succeeded: its results were not "
                     "uploaded", EXIT_FAILED)
        return EXIT_FAILED

    def _upload(self, kind: str, deadline: Deadline) -> bool:
        assert self._upload_client is not None
        started = time.monotonic()
        body = self.store.snapshot_bytes()
        try:
            attempts = upload_snapshot(self._upload_client, self.env.snapshot_url, body,
                                       deadline)
        except SnapshotUploadError as e:
            log = logger.error if kind == "final" else logger.warning
            log("%s snapshot NOT uploaded: %s", kind, e)
            return False
        logger.info("%s snapshot uploaded: %d bytes, %d attempt(s), %.2f s", kind, len(body),
                    attempts, time.monotonic() - started)
        return True

    def _flush(self, sender: EventSender) -> None:
        left = sender.flush(self._deadline(self.flush_timeout_s, SHUTDOWN_FLUSH_BUDGET_S))
        if left:
            logger.error("%d events left undelivered (flush timeout %.0f s%s); they are in "
                         "the snapshot's outbox table", left, self.flush_timeout_s,
                         ", token refused" if sender.auth_failed else "")
        else:
            logger.info("events flushed: %d delivered, %d refused by the controller",
                        sender.delivered, sender.rejected)


def configure_logging() -> None:
    """Plain lines on stderr, UTC timestamps; httpx's per-request lines muted."""
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s",
                                  "%Y-%m-%dT%H:%M:%SZ")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def flush_timeout_from_env() -> float:
    """SIMPLE_FLUSH_TIMEOUT_S (optional, not part of the contract), default 60 s."""
    raw = os.environ.get(FLUSH_TIMEOUT_ENV, "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_FLUSH_TIMEOUT_S
    except ValueError:
        logger.warning("%s=%r is not a number; using %.0f s", FLUSH_TIMEOUT_ENV, raw,
                       DEFAULT_FLUSH_TIMEOUT_S)
        return DEFAULT_FLUSH_TIMEOUT_S


def main() -> int:
    """Run one sandbox attempt; the process exit code."""
    configure_logging()
    try:
        env = SandboxEnv.from_environ()
        export_template_secrets(os.environ)
    except ContractError as e:
        logger.error("contract error: %s", e)
        return EXIT_CONTRACT
    shutdown = ShutdownFlag()
    shutdown.install()
    workdir = Path.cwd()
    try:
        runtime = Runtime(env, workdir, shutdown=shutdown, flush_timeout_s=flush_timeout_from_env())
    except (OSError, sqlite3.Error) as e:
        logger.error("cannot create %s in %s: %s; the sandbox needs a writable working "
                     "directory", SNAPSHOT_FILENAME, workdir, e)
        return EXIT_FAILED
    try:
        exit_code = runtime.run()
    finally:
        runtime.close()
    logger.info("sandbox %s exiting with code %d", env.sandbox_id, exit_code)
    return exit_code
