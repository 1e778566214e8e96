"""The controller as one object: settings, database, catalog, store, backend, reconciler."""

from __future__ import annotations

import functools
import gc
import logging
from pathlib import Path

from controller.backends import create_backend
from controller.backends.base import Backend
from controller.catalog.templates import Catalog, load_catalog
from controller.db.engine import check_ready, create_db_engine, upgrade
from controller.intake.tokens import load_signing_key, set_signing_key
from controller.reconcile.reconciler import Reconciler
from controller.settings import Settings
from controller.store import create_store
from controller.store.base import ObjectStore

logger = logging.getLogger(__name__)


class Controller:
    """Wires the parts together; `start` migrates (if asked) and starts the reconciler."""

    def __init__(
        self, settings: Settings, backend: Backend | None = None, store: ObjectStore | None = None
    ) -> None:
        self.settings = settings
        set_signing_key(load_signing_key(settings.data_dir / "signing.key", settings.signing_key))
        self.catalog: Catalog = load_catalog(catalog_dirs(settings))
        self.engine = create_db_engine(settings.resolved_database_url)
        self.store = store or create_store(settings)
        self.backend = backend or create_backend(settings, notify=self.kick)
        self.reconciler = Reconciler(self.engine, self.backend, self.store, settings)
        self.started = False

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
