"""What a reconcile pass reads (controller/reconcile/pass_reads.py): a pass that only
launches counts the running sandboxes instead of reading them, and must still alert, stop
on a budget and keep the expensive limit as a full pass does."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from controller.catalog.templates import load_catalog
from controller.db.engine import create_db_engine, upgrade
from controller.db.schema import runs, sandboxes
from controller.planning.model import PlanRequest
from controller.reconcile.pass_reads import running_by_run, running_counts, running_rows
from controller.reconcile.reconciler import Reconciler
from controller.runs import create_run
from controller.settings import Settings
from controller.store.local import LocalStore
from tests.quiet_backend import QuietBackend

CATALOG = """templates:
  - {id: cheap_a, category: t, estimate: {cost_usd: [0.01, 0.05], runtime_s: [1, 2]}}
  - {id: cheap_b, category: t, estimate: {cost_usd: [0.01, 0.05], runtime_s: [1, 2]}}
  - {id: big_a, category: t, estimate: {cost_usd: [11, 12], runtime_s: [1, 2]}}
  - {id: big_b, category: t, estimate: {cost_usd: [11, 12], runtime_s: [1, 2]}}
"""


Started = tuple[Reconciler, QuietBackend, str]
Start = Callable[..., Started]


@pytest.fixture
def start(settings: Settings, catalog_dir: Callable[[str], Path]) -> Iterator[Start]:
    """A run of the catalog's templates under a reconciler whose passes are by hand."""
    catalog = load_catalog([catalog_dir(CATALOG)])
    engine = create_db_engine(settings.resolved_database_url)
    upgrade(engine)
    made: list[Reconciler] = []

    def make(templates: tuple[str, ...], **request: Any) -> Started:
        run_id, _ = create_run(
            engine, catalog, PlanRequest(templates=templates, **request),
            {"templates": list(templates)}, backend="process", default_image="x",
        )  # fmt: skip
        backend = QuietBackend()
        store = LocalStore.from_url(settings.resolved_store_url)
        made.append(Reconciler(engine, backend, store, settings))
        return made[-1], backend, run_id

    yield make
    for reconciler in made:
        reconciler.stop()
    engine.dispose()


def statuses(reconciler: Reconciler) -> dict[str, Any]:
    with reconciler.engine.connect() as conn:
        return {r.template_id: r for r in conn.execute(select(sandboxes))}


def wait_for(check: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, f"no {what}"
        time.sleep(0.01)


def test_counting_the_running_gives_what_reading_them_gives(start: Start) -> None:
    reconciler, _, run_id = start(("cheap_a", "cheap_b", "big_a", "big_b"), max_parallel=4)
    reconciler.reconcile_once(full=False)
    with reconciler.engine.connect() as conn:
        rows = running_rows(conn, [run_id, "run-none"])
        counted = running_counts(conn, [run_id, "run-none"])
    assert len(rows) == 4 - 1  # balanced: one expensive one at a time
    read = running_by_run(rows)[run_id]
    assert (counted[run_id].count, counted[run_id].expensive) == (read.count, read.expensive)
    assert (read.count, read.expensive) == (3, 1)
    assert counted[run_id].rows is None and "run-none" not in counted


def test_a_counting_pass_keeps_the_expensive_limit(start: Start) -> None:
    reconciler, backend, _ = start(("big_a", "big_b"), max_parallel=2)
    reconciler.reconcile_once(full=False)
    reconciler.reconcile_once(full=False)
    rows = statuses(reconciler)
    assert sorted(r.status for r in rows.values()) == ["pending", "running"]
    wait_for(lambda: len(backend.launched) == 1, "one launch")


def test_a_counting_pass_stops_what_runs_past_the_budget(start: Start) -> None:
    reconciler, backend, run_id = start(("cheap_a", "cheap_b"), max_parallel=1, budget_usd=0.1)
    reconciler.reconcile_once(full=False)
    first = next(r for r in statuses(reconciler).values() if r.status == "running")
    with reconciler.engine.begin() as conn:  # its reported cost passes the $0.1 budget
        conn.execute(update(sandboxes).where(sandboxes.c.id == first.id).values(cost_usd=0.2))
    reconciler.reconcile_once(full=False)
    wait_for(lambda: backend.stopped == [first.id], "the running sandbox stopped")
    wait_for(lambda: statuses(reconciler)[first.template_id].stop_reason == "budget", "its reason")
    rest = [r for r in statuses(reconciler).values() if r.id != first.id]
    assert [r.status for r in rest] == ["skipped"] and "budget" in rest[0].error
    with reconciler.engine.connect() as conn:
        error = conn.execute(select(runs.c.error).where(runs.c.id == run_id)).scalar_one()
    assert error and "budget exceeded" in error


def test_a_counting_pass_alerts_on_a_running_sandbox(start: Start) -> None:
    reconciler, _, run_id = start(("cheap_a",))
    reconciler.reconcile_once(full=False)
    row = statuses(reconciler)["cheap_a"]
    with reconciler.engine.begin() as conn:  # twice its $0.05 estimate while it runs
        conn.execute(update(sandboxes).where(sandboxes.c.id == row.id).values(cost_usd=0.1))
    reconciler.reconcile_once(full=False)
    with reconciler.engine.connect() as conn:
        alerts = conn.execute(select(runs.c.alerts).where(runs.c.id == run_id)).scalar_one()
    assert [a["sandbox_id"] for a in alerts] == [row.id]
