"""The controller as one object, the one owner of its state.

Settings, database, catalog, store, backend and reconciler, and everything that belongs
to this controller and to no other in the same process: its URL signing key (`Signer`),
its event quotas and group-commit writer (`EventIntake`), its exit path's stamps and
memory (`Finisher`). Nothing of it lives in a module global or on the web app: the API
reaches it through `controller.api.deps`.
"""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from controller.attempts.finisher import Finisher
from controller.attempts.stamps import Stamps
from controller.attempts.urls import AttemptUrls
from controller.backends import create_backend
from controller.backends.base import Backend
from controller.catalog.templates import Catalog, load_catalog
from controller.db.engine import check_ready, create_db_engine, upgrade
from controller.intake.event_intake import EventIntake
from controller.intake.event_quota import EventQuota
from controller.intake.event_writer import EventWriter
from controller.intake.tokens import Signer
from controller.reconcile.reconciler import Reconciler
from controller.settings import Settings
from controller.store import create_store
from controller.store.base import ObjectStore

logger = logging.getLogger(__name__)


class Controller:
    """Wires the parts together; `start` migrates (if asked) and starts the reconciler."""

    def __init__(
        self,
        settings: Settings,
        backend: Backend | None = None,
        store: ObjectStore | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.settings = settings
        # What time it is for this controller: runs' ends, retention. Tests move it.
        self.clock: Callable[[], datetime] = clock or (lambda: datetime.now(UTC))
        self.signer = Signer.load(settings.data_dir / "signing.key", settings.signing_key)
        self.catalog: Catalog = load_catalog(catalog_dirs(settings))
        self.engine = create_db_engine(settings.resolved_database_url)
        self.store = store or create_store(settings)
        self.backend = backend or create_backend(settings, notify=self.kick)
        self.event_writer = EventWriter(
            self.engine, settings.ingest_queue_max_events, settings.ingest_retry_after_s
        )
        self.event_quota = EventQuota(
            self.engine, settings.events_max_per_attempt, settings.events_max_bytes_per_attempt
        )
        self.event_intake = EventIntake(self.event_writer, self.event_quota)
        self.stamps = Stamps(self.engine)
        self.finisher = Finisher(self.engine, self.backend, self.store, settings, self.stamps)
        self.urls = AttemptUrls(self.store, self.signer, settings.resolved_controller_url)
        self.reconciler = Reconciler(
            self.engine, self.backend, self.store, settings, clock=self.now, urls=self.urls,
            finisher=self.finisher,
        )
        self.started = False

    def now(self) -> datetime:
        """The controller's clock, read anew each time (a test may replace `clock`)."""
        return self.clock()

    def kick(self) -> None:
        if hasattr(self, "reconciler"):
            self.reconciler.kick()

    def start(self, migrate: bool = True) -> None:
        if migrate:
            upgrade(self.engine)
        settle_heap()
        self.backend.start()
        self.reconciler.start()
        self.reconciler.kick()
        self.started = True
        logger.info(
            "controller started: backend=%s database=%s store=%s",
            self.backend.name,
            self.engine.url.render_as_string(hide_password=True),
            self.settings.resolved_store_url,
        )

    def check_ready(self) -> None:
        """Raise UnavailableError naming what is not ready."""
        check_ready(self.engine)
        self.store.check()
        self.backend.check()

    def close(self) -> None:
        self.reconciler.stop()
        self.event_writer.close()
        self.backend.close()
        self.engine.dispose()
        logger.info("controller stopped")


@functools.cache  # once per process: what is frozen is never collected again
def settle_heap() -> None:
    """Move what start-up made (modules, classes, the catalog: most of the heap) out of the
    garbage collector's sight. A full collection scanned all of it, 70-120 ms with the
    GIL held, about every 20 s of a busy controller: the slowest passes and pages."""
    gc.collect()
    gc.freeze()


def catalog_dirs(settings: Settings) -> list[Path]:
    return [settings.builtin_catalog_dir, *settings.catalog_dirs]
