# ruff: noqa: F811 - the fixtures imported from tests.services are parameters here
"""The lease in PostgreSQL and the fence on a leader's writes: two contenders on one
database, a takeover, and the old leader's writes and backend calls refused."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, insert, select, update

from controller.db.engine import create_db_engine, upgrade
from controller.db.schema import leases, runs
from controller.errors import FencedError
from controller.leader.db_lease import DatabaseLease
from controller.leader.elector import Elector
from controller.leader.fence import Fence, FencedBackend, fence_engine
from tests.leader.test_elector import Clock
from tests.services import pg_server, pg_server_url  # noqa: F401 - fixtures

pytestmark = pytest.mark.postgres
LEASE = "simple-reconciler"


@pytest.fixture
def database(pg_server_url: str) -> Iterator[str]:
    engine = create_db_engine(pg_server_url)
    upgrade(engine)
    engine.dispose()
    yield pg_server_url


class Contender:
    """One reconciler's parts: its lease's engine, its fenced engine, its elector."""

    def __init__(self, url: str, holder: str, clock: Clock) -> None:
        self.lease_engine = create_db_engine(url)
        self.engine = create_db_engine(url)
        self.elector = Elector(DatabaseLease(self.lease_engine, LEASE), holder, 15, 10, 2,
                               monotonic=clock)
        fence_engine(self.engine, LEASE, self.elector)

    def write(self, run_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(insert(runs).values(**run_row(run_id)))

    def close(self) -> None:
        self.engine.dispose()
        self.lease_engine.dispose()


def run_row(run_id: str) -> dict[str, Any]:
    from datetime import UTC, datetime

    return {"id": run_id, "status": "pending", "request": {}, "plan": {}, "max_parallel": 1,
            "created_at": datetime.now(UTC), "backend": "process"}


@pytest.fixture
def pair(database: str) -> Iterator[tuple[Contender, Contender, Clock, Engine]]:
    clock = Clock()
    a, b = Contender(database, "a", clock), Contender(database, "b", clock)
    plain = create_db_engine(database)
    yield a, b, clock, plain
    for engine in (a, b):
        engine.close()
    plain.dispose()


def run_ids(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return sorted(conn.execute(select(runs.c.id)).scalars())


def test_one_leads_the_other_takes_over_and_the_old_leader_writes_nothing(
    pair: tuple[Contender, Contender, Clock, Engine],
) -> None:
    a, b, clock, plain = pair
    a.elector.try_once()
    b.elector.try_once()
    assert a.elector.leading() and not b.elector.leading()
    a.write("run-by-a")
    with pytest.raises(FencedError, match="not leading"):
        b.write("run-by-b")
    clock.now += 30  # a paused past its lease (its clock and b's run on)
    b.elector.try_once()
    assert b.elector.leading() and b.elector.epoch == 2
    a.elector._renewed = clock.now  # as if a's deadline had not passed: only the row can tell
    with pytest.raises(FencedError, match="stale"):
        a.write("run-by-a-after-takeover")
    assert not a.elector.leading(), "a refused write makes it step down"
    b.write("run-by-b-leading")
    assert run_ids(plain) == ["run-by-a", "run-by-b-leading"]


def test_a_takeover_waits_for_the_old_leaders_open_transaction(
    pair: tuple[Contender, Contender, Clock, Engine],
) -> None:
    """The fence's lock: what a leader began under its epoch commits whole, before the new
    epoch exists; nothing of it lands after."""
    a, b, clock, plain = pair
    a.elector.try_once()
    b.elector.try_once()
    conn = a.engine.connect()
    transaction = conn.begin()
    conn.execute(insert(runs).values(**run_row("run-in-flight")))  # fence passed, row held
    clock.now += 30
    took: list[bool] = []
    thread = threading.Thread(target=lambda: took.append(bool(b.elector.try_once() or True)))
    thread.start()
    thread.join(timeout=1.0)
    assert thread.is_alive(), "the takeover must wait for the fenced transaction"
    conn.execute(update(runs).where(runs.c.id == "run-in-flight").values(status="running"))
    transaction.commit()
    conn.close()
    thread.join(timeout=10)
    assert b.elector.leading() and took
    with plain.connect() as check:
        assert check.execute(select(runs.c.status)).scalar() == "running"
        assert check.execute(select(leases.c.holder, leases.c.epoch)).one() == ("b", 2)


class Recorder:
    """A backend that only records what it was asked."""

    name = "process"
    supports_adoption = True
    supports_oom_detection = False
    stop_removes_output = False

    def __init__(self) -> None:
        self.calls: list[str] = []

    def launch(self, spec: Any) -> None:
        self.calls.append(f"launch {spec}")

    def stop(self, sandbox_id: str) -> None:
        self.calls.append(f"stop {sandbox_id}")

    def remove(self, sandbox_id: str) -> None:
        self.calls.append(f"remove {sandbox_id}")


def test_the_backend_is_asked_nothing_by_a_leader_whose_epoch_is_stale(
    pair: tuple[Contender, Contender, Clock, Engine],
) -> None:
    a, b, clock, _plain = pair
    inner = Recorder()
    backend = FencedBackend(inner, Fence(a.engine, LEASE, a.elector))  # type: ignore[arg-type]
    a.elector.try_once()
    b.elector.try_once()
    backend.stop("sbx-1")
    clock.now += 30
    b.elector.try_once()
    assert b.elector.leading()
    a.elector._renewed = clock.now
    for call in (lambda: backend.stop("sbx-2"), lambda: backend.remove("sbx-3")):
        with pytest.raises(FencedError):
            call()
    assert inner.calls == ["stop sbx-1"] and not a.elector.leading()


def test_a_lease_created_by_two_at_once_has_one_holder(database: str) -> None:
    engines = [create_db_engine(database) for _ in range(2)]
    try:
        stores = [DatabaseLease(e, LEASE) for e in engines]
        results: list[Any] = [None, None]
        barrier = threading.Barrier(2)

        def take(n: int) -> None:
            barrier.wait()
            results[n] = stores[n].acquire(f"h{n}", None)

        threads = [threading.Thread(target=take, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert sum(r is not None for r in results) == 1
        assert stores[0].read() is not None and stores[0].read().epoch == 1  # type: ignore[union-attr]
    finally:
        for e in engines:
            e.dispose()


def test_a_released_lease_is_taken_at_once_and_fences_the_old_leader(
    pair: tuple[Contender, Contender, Clock, Engine],
) -> None:
    a, b, clock, plain = pair
    a.elector.try_once()
    b.elector.try_once()
    epoch = a.elector.epoch
    assert epoch == 1
    a.elector.stop()
    clock.now += 0.5  # well within the lease: only the release lets b in
    b.elector.try_once()
    assert b.elector.leading() and b.elector.epoch == 3
    with plain.connect() as conn:
        assert conn.execute(select(leases.c.holder, leases.c.epoch)).one() == ("b", 3)
    a.elector._epoch, a.elector._renewed = epoch, clock.now  # as if a went on regardless
    with pytest.raises(FencedError, match="stale"):
        a.write("run-after-release")
