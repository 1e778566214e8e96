"""Retention without sandboxes: runs, events and store objects written straight, a clock
that is a variable. What goes and what stays, the daily schedule the database remembers
across restarts, and bounded transactions over a backlog."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, insert, select

from controller.db.schema import events, maintenance, runs
from controller.reconcile.daily_gc import DailyGc
from controller.results.retention import collect_garbage
from controller.settings import Settings
from controller.store.base import (
    items_key,
    log_key,
    resume_key,
    snapshot_key,
    stage_input_key,
)
from controller.store.local import LocalStore

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


class Inline:
    """An executor that runs work at once."""

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")


def seed_run(engine: Engine, store: LocalStore, run_id: str, ended: datetime | None,
             status: str = "succeeded", n_events: int = 3) -> list[str]:
    """A run of one sandbox (two attempts) with every kind of object; its store keys."""
    sandbox = f"{run_id.removeprefix('run-')}-t"
    with engine.begin() as conn:
        conn.execute(insert(runs).values(
            id=run_id, status=status, backend="process", request={}, plan={},
            max_parallel=1, cancel_requested=False, created_at=T0 - timedelta(days=90),
            finished_at=ended, stage=0, confirm_over=False))
        if n_events:
            conn.execute(insert(events), [
                {"sandbox_id": sandbox, "run_id": run_id, "event_id": f"e{n}", "attempt": 1,
                 "seq": n + 1, "type": "progress", "time": T0, "data": {}, "body_hash": "h",
                 "received_at": T0} for n in range(n_events)])
    keys = [log_key(run_id, sandbox, 1), log_key(run_id, sandbox, 2),
            items_key(run_id, sandbox), items_key(run_id, sandbox, 2),
            resume_key(run_id, sandbox, 2), stage_input_key(run_id, 1),
            snapshot_key(run_id, sandbox, 1), snapshot_key(run_id, sandbox, 2)]
    for key in keys:
        store.put(key, b"x" * 10)
    return keys


def event_rows(engine: Engine, run_id: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(events)
                                .where(events.c.run_id == run_id)).scalar() or 0)


def stored(store: LocalStore, run_id: str) -> set[str]:
    """What the store directory holds of `run_id`, read from the disk."""
    return {p.relative_to(store.root).as_posix() for p in store.root.rglob("*")
            if p.is_file() and f"/{run_id}/" in p.relative_to(store.root).as_posix()}


def test_old_runs_lose_logs_items_resume_inputs_and_events_keep_snapshots(
    engine: Engine, store: LocalStore
) -> None:
    old = seed_run(engine, store, "run-0000old1", T0 - timedelta(days=31))
    recent = seed_run(engine, store, "run-0000new1", T0 - timedelta(days=29))
    going = seed_run(engine, store, "run-0000run1", None, status="running")

    dry = collect_garbage(engine, store, now=T0, retention_days=30, dry_run=True)
    assert (dry.runs, dry.objects, dry.bytes, dry.event_rows) == (1, 6, 60, 3)
    assert stored(store, "run-0000old1") == set(old)  # a dry run removes nothing
    assert event_rows(engine, "run-0000old1") == 3

    done = collect_garbage(engine, store, now=T0, retention_days=30)
    assert done.to_dict() | {"cutoff": None} == dry.to_dict() | {"dry_run": False,
                                                                 "cutoff": None}
    assert stored(store, "run-0000old1") == {
        "snapshots/run-0000old1/0000old1-t/attempt-1.sqlite",
        "snapshots/run-0000old1/0000old1-t/attempt-2.sqlite"}
    assert event_rows(engine, "run-0000old1") == 0
    assert stored(store, "run-0000new1") == set(recent)
    assert stored(store, "run-0000run1") == set(going)
    assert event_rows(engine, "run-0000new1") == 3
    with engine.connect() as conn:
        purged = dict(conn.execute(select(runs.c.id, runs.c.purged_at)).all())
    assert purged == {"run-0000old1": T0, "run-0000new1": None, "run-0000run1": None}

    again = collect_garbage(engine, store, now=T0, retention_days=30)
    assert (again.runs, again.objects, again.event_rows) == (0, 0, 0)
    off = collect_garbage(engine, store, now=T0 + timedelta(days=400), retention_days=0)
    assert (off.runs, off.cutoff) == (0, None)
    assert stored(store, "run-0000new1") == set(recent)


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[tuple[str, int]]]:
    """Every statement run on `engine` with the rows it touched."""
    seen: list[tuple[str, int]] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append((statement, cursor.rowcount))

    event.listen(engine, "after_cursor_execute", record)
    yield seen
    event.remove(engine, "after_cursor_execute", record)


def test_a_backlog_goes_in_bounded_transactions(
    engine: Engine, store: LocalStore, statements: list[tuple[str, int]]
) -> None:
    for n in range(5):
        seed_run(engine, store, f"run-0000bac{n}", T0 - timedelta(days=40 + n), n_events=7)

    dry = collect_garbage(engine, store, now=T0, retention_days=30, dry_run=True, run_batch=2)
    assert (dry.runs, dry.event_rows) == (5, 35)  # a dry run pages on without marking
    statements.clear()
    result = collect_garbage(engine, store, now=T0, retention_days=30, run_batch=2,
                             row_batch=4)
    assert (result.runs, result.event_rows, result.complete) == (5, 35, True)
    deletes = [rows for sql, rows in statements if sql.lstrip().upper().startswith("DELETE")]
    assert deletes and max(deletes) <= 4 and sum(deletes) == 35
    marks = [rows for sql, rows in statements if sql.lstrip().upper().startswith("UPDATE")]
    assert marks == [2, 2, 1]  # runs marked a batch at a time

    for n in range(3):
        seed_run(engine, store, f"run-0000mor{n}", T0 - timedelta(days=50 + n))
    capped = collect_garbage(engine, store, now=T0, retention_days=30, max_runs=2)
    assert (capped.runs, capped.complete) == (2, False)
    rest = collect_garbage(engine, store, now=T0, retention_days=30, max_runs=2)
    assert (rest.runs, rest.complete) == (1, True)


def test_the_reconciler_collects_once_a_day_as_the_database_remembers(
    engine: Engine, store: LocalStore, settings: Settings
) -> None:
    first = seed_run(engine, store, "run-0000day1", T0 - timedelta(days=31))
    clock = Clock(T0)
    daily = DailyGc(engine, store, settings, clock, Inline())  # type: ignore[arg-type]
    assert daily.maybe_start()
    assert stored(store, "run-0000day1") == {k for k in first if "/attempt-" in k
                                             and k.startswith("snapshots/")}
    with engine.connect() as conn:
        row = conn.execute(select(maintenance)).one()
    assert (row.task, row.started_at, row.result["runs"]) == ("gc", T0, 1)

    # A run that expires an hour later; a restarted controller (a new DailyGc) does not
    # collect again before the day is over, the next day it does.
    second = seed_run(engine, store, "run-0000day2", T0 - timedelta(days=30, hours=-1))
    clock.now = T0 + timedelta(hours=23)
    restarted = DailyGc(engine, store, settings, clock, Inline())  # type: ignore[arg-type]
    assert not restarted.maybe_start()
    assert not daily.maybe_start()
    assert stored(store, "run-0000day2") == set(second)
    clock.now = T0 + timedelta(days=1)
    assert restarted.maybe_start()
    assert not daily.maybe_start()  # the other one's claim is in the database
    assert len(stored(store, "run-0000day2")) == 2
    with engine.connect() as conn:
        assert conn.execute(select(maintenance.c.started_at)).scalar() == T0 + timedelta(days=1)


def test_no_daily_gc_when_retention_is_off(
    engine: Engine, store: LocalStore, settings: Settings
) -> None:
    keys = seed_run(engine, store, "run-0000off1", T0 - timedelta(days=300))
    off = settings.model_copy(update={"retention_days": 0})
    assert not DailyGc(engine, store, off, Clock(T0), Inline()).maybe_start()  # type: ignore[arg-type]
    assert stored(store, "run-0000off1") == set(keys)
