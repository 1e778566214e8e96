"""Stopping attempts: the reason recorded, the output kept, the stop sent again if it
did not take.

Stops go out in the background, every one at once: archiving an attempt's output and a
graceful stop take a while each, and a cancelled run has many to stop.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Executor
from typing import Any

from sqlalchemy import Engine, update

from controller import metrics
from controller.attempts.finisher import archive_logs
from controller.backends.base import Backend
from controller.db.schema import sandboxes
from controller.errors import SimpleError
from controller.states import StopReason
from controller.store.base import ObjectStore

logger = logging.getLogger(__name__)

RESTOP_AFTER_S = 10.0  # a stop that did not take (e.g. sent before the start) is sent again

Attempt = tuple[str, int]  # (sandbox id, attempt number)


class Stopper:
    """Stops attempts in the background and remembers when each stop was sent."""

    def __init__(
        self, engine: Engine, backend: Backend, store: ObjectStore, background: Executor
    ) -> None:
        self.engine, self.backend, self.store = engine, backend, store
        self.background = background
        self._sent: dict[Attempt, float] = {}
        self._under_way: set[Attempt] = set()  # attempts whose stop reason is being written

    def stop(self, row: Any, reason: StopReason) -> None:
        """Record why the attempt stops and stop it, in the background."""
        key = (row.id, row.attempt)
        if key in self._under_way:  # its stop reason is not committed yet
            return
        self._under_way.add(key)
        self._sent[key] = time.monotonic()
        self.background.submit(self._archive_and_stop, row, reason)

    def resend_if_due(self, row: Any) -> None:
        """Send the stop again if the attempt still runs a while after the last one (that
        stop came before its start)."""
        if time.monotonic() - self._sent.get((row.id, row.attempt), 0.0) > RESTOP_AFTER_S:
            self._sent[(row.id, row.attempt)] = time.monotonic()
            self.background.submit(self._stop_now, row.id)

    def forget(self, sandbox_id: str, attempt: int) -> None:
        """The attempt has ended: no stop of it is pending any more."""
        self._sent.pop((sandbox_id, attempt), None)

    def _archive_and_stop(self, row: Any, reason: StopReason) -> None:
        try:
            # Archive the output first where stopping deletes it with the sandbox; elsewhere
            # it is archived after the exit, and the stop goes out at once.
            archived = (
                archive_logs(self.backend, self.store, row)
                if self.backend.stop_removes_output
                else None
            )
            log = {"log_key": archived[0], "log_dropped_bytes": archived[1]} if archived else {}
            with self.engine.begin() as conn:
                conn.execute(
                    update(sandboxes)
                    .where(sandboxes.c.id == row.id, sandboxes.c.attempt == row.attempt)
                    .values(stop_reason=reason, **log)
                )
            logger.info("stopping sandbox %s: %s", row.id, reason.value)
            self._stop_now(row.id)
        except Exception:  # the next pass sees no stop reason and tries again
            logger.exception("stopping sandbox %s failed; will retry", row.id)
        finally:
            self._under_way.discard((row.id, row.attempt))

    def _stop_now(self, sandbox_id: str) -> None:
        try:
            self.backend.stop(sandbox_id)
        except SimpleError as e:
            metrics.backend_error(self.backend, "stop")
            logger.warning("could not stop sandbox %s (will retry): %s", sandbox_id, e)
