"""Periodic chores in the database (table `maintenance`): when each last started.

A chore is claimed with a compare-and-set on its row, so two controllers on one
database, or one restarted, never start it twice within its interval: the time it
last started is in the database, not in a process.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from controller.db.schema import maintenance


def claim_task(engine: Engine, task: str, now: datetime, interval: timedelta) -> datetime | None:
    """Claim `task` if it last started `interval` or more before `now` (or never): None
    when claimed, else when it is next due."""
    try:
        with engine.begin() as conn:
            last = conn.execute(
                select(maintenance.c.started_at).where(maintenance.c.task == task)
            ).scalar()
            if last is not None and now < last + interval:
                return last + interval
            if last is None:
                conn.execute(insert(maintenance).values(task=task, started_at=now))
                return None
            claimed = conn.execute(
                update(maintenance)
                .where(maintenance.c.task == task, maintenance.c.started_at == last)
                .values(started_at=now, finished_at=None)
            ).rowcount
    except IntegrityError:  # another controller inserted the first row meanwhile
        return now + interval
    return None if claimed == 1 else now + interval


def record_task(engine: Engine, task: str, finished_at: datetime, result: dict[str, Any]) -> None:
    """What the claimed run of `task` did, when it finished."""
    with engine.begin() as conn:
        conn.execute(
            update(maintenance)
            .where(maintenance.c.task == task)
            .values(finished_at=finished_at, result=result)
        )


def task_row(engine: Engine, task: str) -> dict[str, Any] | None:
    """The row of `task`: started_at, finished_at, result; None if it never ran."""
    with engine.connect() as conn:
        row = conn.execute(select(maintenance).where(maintenance.c.task == task)).first()
    return None if row is None else row._asdict()
