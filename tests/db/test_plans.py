"""Run plans are read and parsed once per process and engine (controller.db.plans): the
run page and every reconcile pass read runs without their plan column."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert, update

from controller.db import plans as plans_module
from controller.db.engine import create_db_engine, upgrade
from controller.db.plans import run_with_plan, select_runs, with_plans
from controller.db.schema import runs


def _engine(url: str) -> Engine:
    engine = create_db_engine(url)
    upgrade(engine)
    return engine


def _add_run(engine: Engine, run_id: str, plan: dict[str, Any]) -> None:
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(insert(runs).values(
            id=run_id, status="running", backend="process", request={}, plan=plan,
            max_parallel=1, cancel_requested=False, created_at=now,
        ))  # fmt: skip


def _plan_reads(engine: Engine) -> list[str]:
    """The statements that read the plan column, as they are executed from now on."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if re.search(r'runs\."?plan\b', statement):  # SQLite quotes the word
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    return seen


def test_a_plan_is_read_once_and_the_rest_of_the_row_every_time(engine: Engine) -> None:
    _add_run(engine, "run-a", {"selected": ["t1", "t2"]})
    reads = _plan_reads(engine)
    with engine.connect() as conn:
        first = run_with_plan(conn, "run-a")
    with engine.begin() as conn:
        conn.execute(update(runs).where(runs.c.id == "run-a").values(status="succeeded"))
    with engine.connect() as conn:
        again = run_with_plan(conn, "run-a")
        missing = run_with_plan(conn, "run-nope")
    assert first is not None and again is not None and missing is None
    assert first.plan == again.plan == {"selected": ["t1", "t2"]}
    assert (first.status, again.status) == ("running", "succeeded")
    assert len(reads) == 1, reads


def test_the_plans_kept_are_bounded_least_recently_used_first(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plans_module, "PLANS_KEPT", 2)
    for name in "abc":
        _add_run(engine, f"run-{name}", {"selected": [name]})
    reads = _plan_reads(engine)
    with engine.connect() as conn:
        for name in "abcb":
            run_with_plan(conn, f"run-{name}")
        assert len(reads) == 3  # a, b, c; b again from the cache
        run_with_plan(conn, "run-a")  # a was dropped for c
        assert len(reads) == 4
        run_with_plan(conn, "run-b")  # b was used last: still kept
        assert len(reads) == 4
        rows = with_plans(conn, conn.execute(select_runs().order_by(runs.c.id)).all())
    assert [r.plan["selected"] for r in rows] == [["a"], ["b"], ["c"]]


def test_each_database_has_its_own_plans(tmp_path: Path) -> None:
    one, two = (_engine(f"sqlite:///{tmp_path / name}") for name in ("one.db", "two.db"))
    _add_run(one, "run-a", {"selected": ["one"]})
    _add_run(two, "run-a", {"selected": ["two"]})
    with one.connect() as a, two.connect() as b:
        assert run_with_plan(a, "run-a").plan == {"selected": ["one"]}  # type: ignore[union-attr]
        assert run_with_plan(b, "run-a").plan == {"selected": ["two"]}  # type: ignore[union-attr]
    one.dispose()
    two.dispose()
