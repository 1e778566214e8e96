"""Ending one attempt: retry or aggregate its snapshot, record it, then archive and clean up."""

from __future__ import annotations

import hashlib
import logging
import os
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, bindparam, select, update
from sqlalchemy.exc import SQLAlchemyError

from controller import metrics
from controller.attempts.stamps import END_ATTEMPT, Stamps
from controller.backends.base import Backend
from controller.db.schema import runs, sandboxes
from controller.errors import SimpleError, SnapshotRejected, StoreError
from controller.intake.aggregator import load_snapshot, read_snapshot_file
from controller.logs import log_context
from controller.results.estimates import record_observation
from controller.results.ledger import append_entry, attempt_record, results_digest
from controller.retry import backoff_s
from controller.settings import Settings
from controller.states import SandboxStatus
from controller.store.base import ObjectStore, log_key, snapshot_key

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    status: SandboxStatus
    exit_code: int | None
    error: str | None
    transient: bool = False
    exited_at: datetime | None = None


Cleanup = Callable[[Callable[[], None]], Any]
"""Runs a piece of clean-up work, e.g. a bounded executor's `submit`."""


Digest = tuple[str, int] | None  # the snapshot object's SHA-256 and size, as fetched


@dataclass(frozen=True)
class Ended:
    """How an attempt ended, as it is written: outcome, sandbox values, snapshot digest."""

    outcome: Outcome
    values: dict[str, Any]
    digest: Digest
    final: bool  # no retry follows


class Finisher:
    """Ends the attempts of one controller, and remembers what ending them needs: its
    database's group-committed stamps, and since when the store has failed to give each
    attempt's snapshot (a store down for longer than SIMPLE_STORE_RETRY_S ends the
    attempt with the reason instead of retrying forever)."""

    def __init__(
        self,
        engine: Engine,
        backend: Backend,
        store: ObjectStore,
        settings: Settings,
        stamps: Stamps | None = None,
    ) -> None:
        self.engine, self.backend, self.store, self.settings = engine, backend, store, settings
        self.stamps = stamps or Stamps(engine)
        self._store_failing_since: dict[tuple[str, int], datetime] = {}

    def finish(
        self,
        row: Any,
        outcome: Outcome,
        now: datetime,
        rng: random.Random,
        cleanup: Cleanup | None = None,
    ) -> bool:
        """Record how an attempt ended; schedule a retry when it may help. True once recorded.

        A final end is recorded first; its logs are archived and the sandbox removed after,
        through `cleanup` (a background queue; None: right here). A retry cleans up first,
        because the next attempt reuses the sandbox's name.
        """
        with log_context(run_id=row.run_id, sandbox_id=row.id, attempt=row.attempt):
            return self._finish(row, outcome, now, rng, cleanup)

    def _finish(
        self, row: Any, outcome: Outcome, now: datetime, rng: random.Random,
        cleanup: Cleanup | None,
    ) -> bool:
        retry = _should_retry(self.engine, self.settings, row, outcome)
        values: dict[str, Any] = {
            "exit_code": outcome.exit_code,
            "error": outcome.error,
            "finished_at": now,
            "log_key": row.log_key,
        }
        rows = None
        digest: Digest = None
        if retry:
            digest = self._prepare_retry(row, outcome, values, now, rng)
        else:
            values["status"] = outcome.status
            fetched = self._fetch_or_wait(row, now)
            if fetched is None:
                return False
            rows, problem, digest = fetched
            if problem:
                values["error"] = f"{outcome.error}; {problem}" if outcome.error else problem
        ended = Ended(outcome, values, digest, not retry)
        if not _record_or_refuse(self.engine, row, ended, rows, now):
            return False
        recorded = datetime.now(UTC)  # after the commit: what "exit -> recorded" means
        _count_end(self.backend, outcome, retry)
        if retry:
            self.stamps.stamp(row.id, row.attempt, None, recorded)
        else:
            logger.info(
                "sandbox %s ended %s after %d attempt(s)%s",
                row.id,
                outcome.status.value,
                row.attempt,
                f": {values['error']}" if values["error"] else "",
            )
            (cleanup or _now)(lambda: self.archive_and_remove(row, recorded))
        return True

    def _prepare_retry(
        self, row: Any, outcome: Outcome, values: dict[str, Any], now: datetime,
        rng: random.Random,
    ) -> Digest:
        """Before a retry: hash the snapshot, archive the logs, remove the sandbox (its name
        is reused), and set when the next attempt is due. The snapshot's digest."""
        settings = self.settings
        digest = _snapshot_digest(self.store, settings, row)
        archived = archive_logs(self.backend, self.store, row)
        if archived is not None:
            values["log_key"], values["log_dropped_bytes"] = archived
        _remove(self.backend, row.id)
        delay = backoff_s(row.attempt, settings.retry_base_s, settings.retry_max_s, rng.random)
        values.update(status=SandboxStatus.PENDING, next_attempt_at=now + timedelta(seconds=delay))
        logger.info(
            "sandbox %s attempt %d %s (%s); retry in %.1f s",
            row.id,
            row.attempt,
            outcome.status.value,
            outcome.error,
            delay,
        )
        return digest

    def _fetch_or_wait(self, row: Any, now: datetime) -> tuple[Any, str | None, Digest] | None:
        """The snapshot's rows and why not; None while the store is down (the next pass
        retries)."""
        settings = self.settings
        try:
            with metrics.AGGREGATION.time():
                fetched = _fetch_snapshot(self.store, settings, row)
        except StoreError as e:
            since = self._store_failing_since.setdefault((row.id, row.attempt), now)
            if now - since < timedelta(seconds=settings.store_retry_s):
                logger.warning("cannot fetch the snapshot of %s yet (will retry): %s", row.id, e)
                return None
            fetched = (
                None,
                f"snapshot not aggregated: the store failed for "
                f"{settings.store_retry_s:.0f} s ({e.message})",
                None,
            )
        self._store_failing_since.pop((row.id, row.attempt), None)
        return fetched

    def archive_and_remove(self, row: Any, recorded_at: datetime | None = None) -> None:
        """After the end is recorded: archive the output, point the row at it, remove the
        sandbox. `recorded_at` (taken after the end's commit) is written here too: one
        transaction less."""
        archived = archive_logs(self.backend, self.store, row)
        log, dropped = archived if archived is not None else (None, None)
        self.stamps.stamp(row.id, row.attempt, log, recorded_at, dropped)
        _remove(self.backend, row.id)


def _count_end(backend: Backend, outcome: Outcome, retry: bool) -> None:
    if retry:
        metrics.SANDBOX_RETRIES.labels(outcome.status.value).inc()
    else:
        metrics.SANDBOX_ENDS.labels(outcome.status.value, backend.name).inc()
    if outcome.exited_at is not None:
        elapsed = (datetime.now(UTC) - outcome.exited_at).total_seconds()
        metrics.EXIT_TO_RECORDED.observe(max(elapsed, 0.0))


def _now(work: Callable[[], None]) -> None:
    work()


def _record_or_refuse(engine: Engine, row: Any, ended: Ended, rows: Any, now: datetime) -> bool:
    """Record with the snapshot's rows; if the database refuses them, without."""
    outcome, values = ended.outcome, ended.values
    try:
        return _record(engine, row, ended, rows, now)
    except SQLAlchemyError as e:  # a snapshot the database refuses must not wedge the sandbox
        if rows is None:
            raise
        logger.warning("snapshot of %s could not be loaded: %s", row.id, e)
        problem = f"snapshot rejected: the database refused its rows ({type(e).__name__})"
        values["error"] = f"{outcome.error}; {problem}" if outcome.error else problem
        return _record(engine, row, ended, None, now)


# Built once, bound per end (`values` name the columns to set).
_END_RUNNING = update(sandboxes).where(
    sandboxes.c.id == bindparam("b_id"),
    sandboxes.c.attempt == bindparam("b_attempt"),
    sandboxes.c.status == SandboxStatus.RUNNING,
)


def _record(engine: Engine, row: Any, ended: Ended, rows: Any, now: datetime) -> bool:
    """Write the attempt's end, its snapshot rows, its ledger entry and (when it is the
    sandbox's last) its observation, in one transaction; False if stale."""
    outcome, values = ended.outcome, ended.values
    cost, tokens = _attempt_cost(row, rows)
    with engine.begin() as conn:
        key = {"b_id": row.id, "b_attempt": row.attempt}
        done = conn.execute(_END_RUNNING, {**values, "aggregated": rows is not None, **key})
        if not done.rowcount:
            return False
        conn.execute(
            END_ATTEMPT,
            dict(
                key,
                status=outcome.status,
                exit_code=outcome.exit_code,
                error=outcome.error,
                finished_at=now,
                cost_usd=cost,
                tokens=tokens,
                snapshot_sha256=ended.digest[0] if ended.digest else None,
                snapshot_bytes=ended.digest[1] if ended.digest else None,
                exited_at=outcome.exited_at,
            )
        )
        if rows is not None:
            load_snapshot(conn, row.run_id, row.id, rows)
        _chain(conn, row, ended, cost, tokens, now, aggregated=rows is not None)
    return True


def _chain(
    conn: Any, row: Any, ended: Ended, cost: float, tokens: int, now: datetime,
    aggregated: bool,
) -> None:
    """The attempt's ledger entry, and for a sandbox's last attempt its observation."""
    record = attempt_record(
        sandbox_id=row.id,
        template_id=row.template_id,
        attempt=row.attempt,
        status=ended.outcome.status,
        exit_code=ended.outcome.exit_code,
        cost_usd=cost,
        tokens=tokens,
        snapshot_sha256=ended.digest[0] if ended.digest else None,
        snapshot_bytes=ended.digest[1] if ended.digest else None,
        sandbox_status=ended.values.get("status") if ended.final else None,
        results_digest=results_digest(conn, row.id) if aggregated else None,
    )
    append_entry(conn, row.run_id, record, now)
    if ended.final:
        record_observation(conn, row, ended.outcome.status, cost, now)


def _attempt_cost(row: Any, rows: Any) -> tuple[float, int]:
    """The attempt's cost and tokens: its aggregated snapshot's, else its live events'."""
    if rows is not None:
        cost = sum(float(r["cost_usd"] or 0.0) for r in rows.runs)
        tokens = sum(int(r["tokens_used"] or 0) for r in rows.runs)
        return round(cost, 6), tokens
    return round(float(row.cost_usd or 0.0), 6), int(getattr(row, "tokens", 0) or 0)


def _should_retry(engine: Engine, settings: Settings, row: Any, outcome: Outcome) -> bool:
    if row.attempt >= settings.max_attempts:
        return False
    if not (outcome.transient or outcome.status == SandboxStatus.LOST):
        return False
    with engine.connect() as conn:
        cancelled = conn.execute(
            select(runs.c.cancel_requested).where(runs.c.id == row.run_id)
        ).scalar()
    return not cancelled


def _fetch_snapshot(
    store: ObjectStore, settings: Settings, row: Any
) -> tuple[Any, str | None, Digest]:
    """The snapshot's rows (or why none), and the object's SHA-256 and size as fetched:
    streamed to a private temporary file, never the whole object in memory."""
    key = snapshot_key(row.run_id, row.id, row.attempt)
    try:
        spooled = _spool(store, key, settings.snapshot_max_bytes)
    except SimpleError as e:
        if isinstance(e, StoreError) and e.transient:
            raise
        return None, f"snapshot rejected: {e.message}", None
    if spooled is None:
        return None, "no snapshot was uploaded, so it adds nothing to the totals", None
    path, digest = spooled
    try:
        return read_snapshot_file(str(path), settings.snapshot_max_bytes), None, digest
    except SnapshotRejected as e:
        logger.warning("snapshot of %s rejected: %s", row.id, e.message)
        return None, f"snapshot rejected: {e.message}", digest
    finally:
        path.unlink(missing_ok=True)


def _spool(store: ObjectStore, key: str, max_bytes: int) -> tuple[Path, Digest] | None:
    """The object at `key` in a private temporary file, a chunk at a time, with its digest."""
    chunks = store.open(key, max_bytes=max_bytes)
    if chunks is None:
        return None
    fd, name = tempfile.mkstemp(prefix="simple-snapshot-", suffix=".sqlite")
    sha, size = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                sha.update(chunk)
                size += len(chunk)
                handle.write(chunk)
    except BaseException:
        os.unlink(name)
        raise
    return Path(name), (sha.hexdigest(), size)


def _snapshot_digest(store: ObjectStore, settings: Settings, row: Any) -> Digest:
    """The digest of an attempt's snapshot that is not aggregated (a retry follows),
    hashed as it streams."""
    try:
        chunks = store.open(
            snapshot_key(row.run_id, row.id, row.attempt), max_bytes=settings.snapshot_max_bytes
        )
        if chunks is None:
            return None
        sha, size = hashlib.sha256(), 0
        for chunk in chunks:
            sha.update(chunk)
            size += len(chunk)
    except SimpleError as e:
        logger.warning("snapshot of %s attempt %d not hashed: %s", row.id, row.attempt, e)
        return None
    return sha.hexdigest(), size


def archive_logs(backend: Backend, store: ObjectStore, row: Any) -> tuple[str, int] | None:
    """Copy the attempt's output, as kept under its log budget, to the store, a chunk at
    a time (never all of it in memory); its key and the bytes the budget dropped, or None
    when there is none."""
    try:
        view = backend.open_logs(row.id)
    except SimpleError:
        return None
    key = log_key(row.run_id, row.id, row.attempt)
    try:
        store.put_chunks(key, view.chunks)
    except SimpleError as e:
        logger.warning("could not archive the logs of %s: %s", row.id, e)
        return None
    return key, view.dropped


def _remove(backend: Backend, sandbox_id: str) -> None:
    try:
        backend.remove(sandbox_id)
    except SimpleError as e:
        metrics.backend_error(backend, "remove")
        logger.warning("could not remove sandbox %s (the next pass retries): %s", sandbox_id, e)
