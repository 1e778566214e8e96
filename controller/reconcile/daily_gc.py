"""The reconciler's daily retention pass (`simplectl gc`, run by the controller itself).

Each full pass asks `maybe_start`; it answers from memory until the next due time, so
the database is read about once a day. When due, the chore is claimed in the database
(`db.tasks`): a restarted controller, or a second one on the same database, does not
run it again within the day. The gc itself runs on the reconciler's background pool,
never in a pass, and stops between batches when the controller stops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from datetime import datetime, timedelta

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from controller.db.tasks import claim_task, record_task
from controller.results.retention import collect_garbage
from controller.settings import Settings
from controller.store.base import ObjectStore

logger = logging.getLogger(__name__)

GC_TASK = "gc"
GC_INTERVAL = timedelta(days=1)


class DailyGc:
    """Starts retention's gc at most once per `interval`, as the database remembers."""

    def __init__(
        self,
        engine: Engine,
        store: ObjectStore,
        settings: Settings,
        clock: Callable[[], datetime],
        background: Executor,
        interval: timedelta = GC_INTERVAL,
    ) -> None:
        self.engine, self.store, self.settings = engine, store, settings
        self.clock, self.background, self.interval = clock, background, interval
        self._due: datetime | None = None  # not before this (None: ask the database)
        self._running = threading.Event()
        self._stopping = threading.Event()

    def maybe_start(self) -> bool:
        """Start a gc if one is due and this controller claims it; whether it started."""
        if self.settings.retention_days <= 0 or self._running.is_set():
            return False
        now = self.clock()
        if self._due is not None and now < self._due:
            return False
        try:
            due = claim_task(self.engine, GC_TASK, now, self.interval)
        except SQLAlchemyError as e:  # a pass must not fail for a chore: asked again later
            logger.warning("retention: cannot claim the daily gc: %s", e)
            self._due = now + timedelta(minutes=5)
            return False
        if due is not None:
            self._due = due
            return False
        self._due = now + self.interval
        self._running.set()
        try:
            self.background.submit(self._collect, now)
        except RuntimeError:  # the pool is shutting down: the controller is stopping
            self._running.clear()
            return False
        return True

    def stop(self) -> None:
        """Ask a running gc to stop after its current batch."""
        self._stopping.set()

    def _collect(self, now: datetime) -> None:
        try:
            result = collect_garbage(
                self.engine,
                self.store,
                now=now,
                retention_days=self.settings.retention_days,
                should_stop=self._stopping.is_set,
            )
            record_task(self.engine, GC_TASK, self.clock(), result.to_dict())
            logger.info("retention (daily): %s", result.summary())
        except Exception:  # logged, retried tomorrow: what was purged stays purged
            logger.exception("retention: the daily gc failed")
        finally:
            self._running.clear()
