"""The controller as one object, the one owner of its state.

Settings, database, catalog, store, backend and reconciler, and everything that belongs
to this controller and to no other in the same process: its URL signing key (`Signer`),
its event quotas and group-commit writer (`EventIntake`), its exit path's stamps and
memory (`Finisher`). Nothing of it lives in a module global or on the web app: the API
reaches it through `controller.api.deps`.

Its role (`SIMPLE_ROLE`) says what it runs: `all` (the API and the reconciler, one
process), `api` (no reconciler; the backend only to read logs; event quotas counted in
the database, shared with other replicas) or `reconciler` (no HTTP routes but health and
metrics; it contends for the lease and acts only while it leads, every write and backend
call fenced by the lease's epoch).
"""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
from controller.leader.choose import create_leadership
from controller.leader.db_lease import read_lease
from controller.leader.fence import Fence, FencedBackend
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
        self.role = settings.role
        self.signer = Signer.load(settings.data_dir / "signing.key", settings.signing_key)
        self.catalog: Catalog = load_catalog(catalog_dirs(settings))
        self.engine = create_db_engine(settings.resolved_database_url)
        self.leadership = create_leadership(settings, self.engine, self._leadership_changed)
        self.store = store or create_store(settings)
        self.backend = backend or create_backend(settings, notify=self.kick)
        if self.role == "reconciler":
            fence = Fence(self.engine, settings.lease_name, self.leadership)
            self.backend = FencedBackend(self.backend, fence)
        self.event_writer = EventWriter(
            self.engine, settings.ingest_queue_max_events, settings.ingest_retry_after_s
        )
        self.event_quota = EventQuota(
            self.engine, settings.events_max_per_attempt, settings.events_max_bytes_per_attempt,
            shared=self.role == "api",
        )
        self.event_intake = EventIntake(self.event_writer, self.event_quota)
        self.stamps = Stamps(self.engine)
        self.finisher = Finisher(self.engine, self.backend, self.store, settings, self.stamps)
        self.urls = AttemptUrls(self.store, self.signer, settings.resolved_controller_url)
        self.reconciler: Reconciler | None = None
        if self.role != "api":
            self.reconciler = Reconciler(
                self.engine, self.backend, self.store, settings, clock=self.now,
                urls=self.urls, finisher=self.finisher, leadership=self.leadership,
            )
        self.started = False

    def now(self) -> datetime:
        """The controller's clock, read anew each time (a test may replace `clock`)."""
        return self.clock()

    def _leadership_changed(self, leading: bool) -> None:
        if leading:  # adopt what runs and carry on: a full pass at once
            self.kick()

    def kick(self) -> None:
        if getattr(self, "reconciler", None) is not None:
            self.reconciler.kick()  # type: ignore[union-attr]

    def start(self, migrate: bool = True) -> None:
        if migrate:  # a reconciler's own engine is fenced: it migrates on another
            migrating = self.engine if self.role == "all" else create_db_engine(
                self.settings.resolved_database_url)
            upgrade(migrating)
            if migrating is not self.engine:
                migrating.dispose()
        settle_heap()
        if self.reconciler is not None:  # an API replica never starts the backend
            self.backend.start()
            self.leadership.start()
            self.reconciler.start()
            self.reconciler.kick()
        self.started = True
        logger.info(
            "controller started: role=%s backend=%s database=%s store=%s",
            self.role,
            self.backend.name,
            self.engine.url.render_as_string(hide_password=True),
            self.settings.resolved_store_url,
        )

    def check_ready(self) -> None:
        """Raise UnavailableError naming what is not ready. A standby is ready: it serves
        health and metrics, and leads as soon as the lease is free."""
        check_ready(self.engine)
        self.store.check()
        if self.role != "api":
            self.backend.check()

    def leader(self) -> dict[str, Any]:
        """Who leads: this process (one process, or the reconciler that holds the lease),
        else the lease row's holder as the database has it."""
        leading = self.role != "api" and self.leadership.leading()
        if self.role == "all":
            return {"holder": self.leadership.holder, "epoch": None, "leading": True,
                    "role": self.role}
        if leading:
            return {"holder": self.leadership.holder, "epoch": self.leadership.epoch,
                    "leading": True, "role": self.role}
        found = read_lease(self.engine, self.settings.lease_name)
        return {"holder": found[0] if found else None, "epoch": found[1] if found else None,
                "leading": False, "role": self.role}

    def close(self) -> None:
        if self.reconciler is not None:
            self.reconciler.stop()
            self.leadership.stop()
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
