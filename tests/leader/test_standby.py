# ruff: noqa: F811 - the fixtures imported from tests.services are parameters here
"""A standby reconciler passes nothing until it leads, then passes at once; replicas that
start together on one PostgreSQL database migrate one at a time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from sqlalchemy import text

from controller.backends.instant import InstantBackend
from controller.db.engine import create_db_engine, upgrade
from controller.db.revisions import head_revision
from controller.leader.elector import Leadership
from controller.reconcile.reconciler import Reconciler
from controller.settings import Settings
from controller.store import create_store
from tests.services import pg_server, pg_server_url  # noqa: F401 - fixtures


class Switch(Leadership):
    """Leads when told to; counts how often it was asked."""

    def __init__(self) -> None:
        super().__init__("test")
        self.on = False
        self.asked = 0

    def leading(self) -> bool:
        self.asked += 1
        return self.on


def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_standby_passes_nothing_until_it_leads(settings: Settings) -> None:
    engine = create_db_engine(settings.resolved_database_url)
    upgrade(engine)
    switch = Switch()
    reconciler = Reconciler(engine, InstantBackend(), create_store(settings),
                            settings.model_copy(update={"reconcile_interval_s": 0.02}),
                            leadership=switch)
    reconciler.start()
    try:
        until(lambda: switch.asked >= 5)  # its loop went round five times, as a standby
        assert reconciler.passes == 0
        switch.on = True
        until(lambda: reconciler.passes >= 1)
    finally:
        reconciler.stop()
        engine.dispose()


@pytest.mark.postgres
def test_replicas_starting_together_migrate_one_at_a_time(pg_server_url: str) -> None:
    engines = [create_db_engine(pg_server_url) for _ in range(3)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(engines))

    def migrate(engine: object) -> None:
        barrier.wait()
        try:
            upgrade(engine)  # type: ignore[arg-type]
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=migrate, args=(e,)) for e in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    try:
        assert errors == []
        with engines[0].connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == (
                head_revision())
    finally:
        for engine in engines:
            engine.dispose()
