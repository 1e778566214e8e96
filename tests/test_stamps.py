"""The exit path's stamps are group-committed (controller.attempts.stamps): stamps queued while
one transaction runs are written together in the next, each caller returning once its
own is committed."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, insert, select

from controller.attempts import stamps
from controller.attempts.stamps import Stamps
from controller.db.schema import attempts, runs, sandboxes

RUN = "run-stamps"
N = 10


@pytest.fixture
def seeded(engine: Engine) -> Engine:
    """A run of N running sandboxes, each with its first attempt."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(insert(runs).values(
            id=RUN, status="running", backend="process", request={"suites": ["x"]},
            plan={}, max_parallel=N, cancel_requested=False, created_at=now, started_at=now,
        ))  # fmt: skip
        conn.execute(insert(sandboxes), [
            {"id": f"sb-{i}", "run_id": RUN, "template_id": "t", "position": i,
             "status": "running", "spec": {"timeout_s": 60}, "attempt": 1, "launched_at": now,
             "last_seq": 0, "cost_usd": 0.0, "prior_cost_usd": 0.0, "tokens": 0,
             "aggregated": False, "expensive": False}
            for i in range(N)
        ])  # fmt: skip
        conn.execute(insert(attempts), [
            {"sandbox_id": f"sb-{i}", "attempt": 1, "status": "running", "started_at": now}
            for i in range(N)
        ])
    return engine


def stamped(engine: Engine) -> list[tuple[str, str | None, bool]]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(sandboxes.c.id, sandboxes.c.log_key, attempts.c.recorded_at.is_not(None))
            .join(attempts, attempts.c.sandbox_id == sandboxes.c.id)
            .order_by(sandboxes.c.position)
        ).all()
    return [tuple(row) for row in rows]


def test_stamps_queued_during_a_write_share_the_next_transaction(
    seeded: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups: list[int] = []
    real_write = stamps._write

    def slow_first(engine: Engine, group: list[Any]) -> None:
        groups.append(len(group))
        if len(groups) == 1:
            time.sleep(0.5)  # the others queue meanwhile
        real_write(engine, group)

    monkeypatch.setattr(stamps, "_write", slow_first)
    now = datetime.now(UTC)
    group = Stamps(seeded)
    first = threading.Thread(target=group.stamp, args=("sb-0", 1, "logs/sb-0", now))
    first.start()
    time.sleep(0.1)
    others = [threading.Thread(target=group.stamp, args=(f"sb-{i}", 1, f"logs/sb-{i}", now))
              for i in range(1, N)]
    for thread in others:
        thread.start()
    for thread in [first, *others]:
        thread.join(timeout=30)
    assert groups == [1, N - 1]  # two transactions for ten stamps
    assert stamped(seeded) == [(f"sb-{i}", f"logs/sb-{i}", True) for i in range(N)]


def test_a_failed_group_fails_each_of_its_stamps_and_the_next_group_is_written(
    seeded: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = stamps._write
    calls: list[int] = []

    def failing_once(engine: Engine, group: list[Any]) -> None:
        calls.append(len(group))
        if len(calls) == 1:
            raise RuntimeError("the database went away")
        real_write(engine, group)

    monkeypatch.setattr(stamps, "_write", failing_once)
    group = Stamps(seeded)
    with pytest.raises(RuntimeError, match="went away"):
        group.stamp("sb-0", 1, "logs/sb-0", None)
    group.stamp("sb-1", 1, None, datetime.now(UTC))  # not stuck "writing"
    assert stamped(seeded)[:2] == [("sb-0", None, False), ("sb-1", None, True)]
