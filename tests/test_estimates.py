"""Estimates that learn and cost alerts.

- After 5 runs of the quick suite on the built-in runtime, the plan's estimates for
  those templates are observed, and a 6th run's actual cost falls inside them for at
  least 6 of 7 templates; `simplectl templates --accuracy` prints the table.
- A sandbox costing 2x its estimate raises the alert within one reconcile pass; with
  confirm_over the run stops launching until confirmed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, update
from typer.testing import CliRunner

from controller.catalog.templates import load_catalog
from controller.cli.embedded import EmbeddedServer
from controller.cli.main import app
from controller.db.engine import create_db_engine, upgrade
from controller.db.schema import events, runs, sandboxes
from controller.errors import ConflictError
from controller.planning.model import PlanRequest
from controller.reconcile.alerts import confirm_run
from controller.reconcile.reconciler import Reconciler
from controller.runs import create_run
from controller.settings import Settings
from controller.store.local import LocalStore
from tests.e2e_helpers import report, start_run, wait_for, wait_run
from tests.quiet_backend import QuietBackend

QUICK = 7


@pytest.mark.once
def test_five_quick_runs_teach_the_planner(settings: Settings) -> None:
    with EmbeddedServer(settings) as server:
        first = [start_run(server.url, {"names": ["quick"], "seed": seed}) for seed in range(1, 6)]
        for run_id in first:
            assert wait_run(server.url, run_id, 300)["status"] == "succeeded"
        plan = httpx.post(f"{server.url}/v1/plans", json={"names": ["quick"]}, timeout=30).json()
        sixth = start_run(server.url, {"names": ["quick"], "seed": 6})
        assert wait_run(server.url, sixth, 300)["status"] == "succeeded"
        actual = {r["template_id"]: r["cost_usd"] for r in report(server.url, sixth)["sandboxes"]}
        estimates = httpx.get(f"{server.url}/v1/estimates", timeout=30).json()["templates"]
    assert len(plan["estimates"]) == QUICK
    assert {e["estimate_source"] for e in plan["estimates"].values()} == {"observed (n=5)"}
    inside = [
        t for t, e in plan["estimates"].items() if e["cost_usd"][0] <= actual[t] <= e["cost_usd"][1]
    ]
    assert len(inside) >= QUICK - 1, (plan["estimates"], actual)
    assert {e["template_id"] for e in estimates} == set(actual)
    assert all(e["runs"] == 6 and e["estimate_source"] == "observed (n=6)" for e in estimates)
    env = {"SIMPLE_DATA_DIR": str(settings.data_dir),
           "SIMPLE_DATABASE_URL": settings.resolved_database_url, "COLUMNS": "200"}
    table = CliRunner().invoke(app, ["templates", "--accuracy"], env=env)
    assert table.exit_code == 0, table.output
    assert "board_meeting" in table.stdout and "observed (n=6)" in table.stdout
    assert "estimate accuracy: 7 templates observed" in table.stdout


@pytest.fixture
def held_run(
    settings: Settings, catalog_dir: Callable[[str], Path]
) -> Iterator[tuple[Reconciler, QuietBackend, str]]:
    """A run of two templates estimated at most $0.05, one at a time, with confirm_over."""
    catalog = load_catalog([catalog_dir(
        "templates:\n"
        "  - {id: pricey, category: t, estimate: {cost_usd: [0.01, 0.05], runtime_s: [1, 2]}}\n"
        "  - {id: later, category: t, estimate: {cost_usd: [0.01, 0.05], runtime_s: [1, 2]}}\n"
    )])
    engine = create_db_engine(settings.resolved_database_url)
    upgrade(engine)
    run_id, _ = create_run(
        engine, catalog, PlanRequest(templates=("pricey", "later"), max_parallel=1),
        {"templates": ["pricey", "later"], "confirm_over": True},
        backend="process", default_image="x",
    )
    backend = QuietBackend()
    reconciler = Reconciler(engine, backend, LocalStore.from_url(settings.resolved_store_url),
                            settings)
    yield reconciler, backend, run_id
    reconciler.stop()
    engine.dispose()


def test_twice_the_estimate_alerts_within_one_pass_and_holds_until_confirmed(
    held_run: tuple[Reconciler, QuietBackend, str],
) -> None:
    reconciler, backend, run_id = held_run
    engine = reconciler.engine
    reconciler.reconcile_once()  # launches `pricey` (one at a time); passes are by hand
    with engine.connect() as conn:
        rows = {r.template_id: r for r in conn.execute(select(sandboxes))}
    assert rows["pricey"].status == "running" and rows["later"].status == "pending"
    with engine.begin() as conn:  # its live cost crosses 2x its $0.05 estimate
        conn.execute(
            update(sandboxes).where(sandboxes.c.id == rows["pricey"].id).values(cost_usd=0.1)
        )
    reconciler.reconcile_once()
    with engine.connect() as conn:
        run = conn.execute(select(runs).where(runs.c.id == run_id)).one()
        streamed = conn.execute(select(events).where(events.c.type == "alert")).all()
    assert len(run.alerts) == 1
    alert = run.alerts[0]
    assert alert["sandbox_id"] == rows["pricey"].id and alert["cost_usd"] == 0.1
    assert alert["estimate_usd"] == 0.05 and alert["ratio"] == 1.2
    assert [e.sandbox_id for e in streamed] == [rows["pricey"].id], "on the run's stream"
    assert run.hold_reason and "over 1.2 x its estimate" in run.hold_reason
    with engine.begin() as conn:  # `pricey` ends: a slot is free, but the run is held
        conn.execute(
            update(sandboxes).where(sandboxes.c.id == rows["pricey"].id)
            .values(status="succeeded", finished_at=datetime.now(UTC))
        )
    reconciler.reconcile_once()
    with engine.connect() as conn:
        later = conn.execute(select(sandboxes).where(sandboxes.c.id == rows["later"].id)).one()
    assert later.status == "pending", "held: nothing launches until confirmed"
    reconciler.reconcile_once()
    with engine.connect() as conn:
        assert len(conn.execute(select(runs.c.alerts)).scalar_one()) == 1, "once per sandbox"
    assert confirm_run(engine, run_id)["confirmed"] == run.hold_reason
    with pytest.raises(ConflictError):
        confirm_run(engine, run_id)
    reconciler.reconcile_once()
    with engine.connect() as conn:
        later = conn.execute(select(sandboxes).where(sandboxes.c.id == rows["later"].id)).one()
    assert later.status == "running", "confirmed: launching goes on"
    wait_for(lambda: len(backend.launched) == 2, what="both launched")
