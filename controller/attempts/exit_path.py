"""The exit path: record each ended attempt as soon as the backend reports it, then
archive its logs and remove it in the background, bounded, off the reconciler's pass.

Two small pools: `finish` records ends (status, snapshot rows) and `cleanup` archives
logs and removes sandboxes; launches use the reconciler's own pool, so they never
wait behind either. An attempt is finished once (an exit pushed by the backend and the
same exit seen by a pass meet here, and a pass that read the row before the end was
recorded does not fetch its snapshot again), and a run is not declared finished while
any of its sandboxes is still being cleaned up.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from controller.attempts.finisher import Finisher, Outcome

logger = logging.getLogger(__name__)

FINISH_WORKERS = 4  # ends recorded at once (each a short transaction)
CLEANUP_WORKERS = 8  # log archives and removals at once (each a few engine calls)
RECORDED_MEMORY = 10_000  # latest recorded attempts remembered, so a stale row is ignored

Ending = Callable[[], "tuple[Any, Outcome] | None"]
"""How an attempt ended, (row, outcome), looked up in the pool; None if it no longer runs."""


class ExitPath:
    """Finishes attempts in the background; `pending` tells the reconciler what is in flight."""

    def __init__(
        self,
        finisher: Finisher,
        clock: Callable[[], datetime],
        rng: random.Random,
        on_done: Callable[[], None],
    ) -> None:
        self.finisher = finisher
        self.clock, self.rng, self._on_done = clock, rng, on_done
        self._lock = threading.Lock()
        self._finishing: set[tuple[str, int]] = set()
        self._recorded: dict[tuple[str, int], None] = {}  # insertion order: oldest first
        self._cleaning: Counter[str] = Counter()  # run id -> sandboxes being cleaned up
        self._cleaning_ids: set[str] = set()
        self._finish_pool = ThreadPoolExecutor(FINISH_WORKERS, thread_name_prefix="finish")
        self._cleanup_pool = ThreadPoolExecutor(CLEANUP_WORKERS, thread_name_prefix="cleanup")

    def finishing(self, sandbox_id: str, attempt: int) -> bool:
        with self._lock:
            return (sandbox_id, attempt) in self._finishing

    def cleaning(self, run_id: str) -> bool:
        """Whether a sandbox of the run still has its logs archived or is being removed."""
        with self._lock:
            return self._cleaning[run_id] > 0

    def cleaning_sandbox(self, sandbox_id: str) -> bool:
        with self._lock:
            return sandbox_id in self._cleaning_ids

    def finish(self, key: tuple[str, int], ending: Ending) -> None:
        """Record the end of attempt `key` in the background; a second call meanwhile is
        ignored, and so is one for an attempt already recorded (a pass's row read before
        the end was committed). `ending` (run in the pool) says how it ended, or None if
        it no longer runs."""
        with self._lock:
            if key in self._finishing or key in self._recorded:
                return
            self._finishing.add(key)
        try:
            self._finish_pool.submit(self._finish, key, ending)
        except RuntimeError:  # shutting down: the next controller's pass records it
            with self._lock:
                self._finishing.discard(key)

    def _finish(self, key: tuple[str, int], ending: Ending) -> None:
        try:
            found = ending()
            if found is None:
                return
            row, outcome = found
            recorded = self.finisher.finish(
                row, outcome, self.clock(), self.rng, lambda work: self._clean_up(row, work)
            )
            if recorded:
                self._remember(key)
        except Exception:  # the next pass sees the sandbox still running and tries again
            logger.exception("recording the end of sandbox %s failed; will retry", key[0])
        finally:
            with self._lock:
                self._finishing.discard(key)
            self._on_done()

    def _remember(self, key: tuple[str, int]) -> None:
        with self._lock:
            self._recorded[key] = None
            if len(self._recorded) > RECORDED_MEMORY:
                del self._recorded[next(iter(self._recorded))]

    def _clean_up(self, row: Any, work: Callable[[], None]) -> None:
        with self._lock:
            self._cleaning[row.run_id] += 1
            self._cleaning_ids.add(row.id)
        try:
            self._cleanup_pool.submit(self._run_cleanup, row, work)
        except RuntimeError:  # shutting down: do it here rather than leave it behind
            self._run_cleanup(row, work)

    def _run_cleanup(self, row: Any, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception:  # garbage collection removes what is left on a later pass
            logger.exception("cleaning up sandbox %s failed", row.id)
        finally:
            with self._lock:
                self._cleaning[row.run_id] -= 1
                if self._cleaning[row.run_id] <= 0:
                    del self._cleaning[row.run_id]
                self._cleaning_ids.discard(row.id)
            self._on_done()

    def shutdown(self) -> None:
        """Let what is queued finish: recorded ends are archived and removed before exit."""
        self._finish_pool.shutdown(wait=True)
        self._cleanup_pool.shutdown(wait=True)
