# ruff: noqa: F811 - the fixtures imported from tests.services are parameters here
"""PostgreSQL for real: migrations, readiness and recovery, ingestion, COPY, report SQL.

Each test runs on a real server (SIMPLE_TEST_DATABASE_URL's, else a throwaway one);
the outage test stops and starts a server of its own. Where behaviour must match
SQLite, the same scenario runs on both and the answers are compared.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select, update

from controller.api.app import create_app
from controller.catalog.templates import Catalog, load_catalog
from controller.cli.embedded import EmbeddedServer
from controller.db.engine import check_ready, create_db_engine, upgrade
from controller.db.revisions import head_revision
from controller.db.schema import events, result_runs, result_steps, sandboxes
from controller.errors import SnapshotRejected, UnavailableError
from controller.intake.aggregator import load_snapshot, read_snapshot
from controller.intake.event_batch import EventRequest, IncomingEvent
from controller.intake.ingest import write_group
from controller.intake.tokens import hash_token
from controller.planning.model import PlanRequest
from controller.results.report import fetch_report
from controller.runs import create_run
from controller.service import Controller
from controller.settings import REPO_CATALOG_DIR, Settings
from sandbox_image.contract import SNAPSHOT_SCHEMA_SQL, EventType
from tests.e2e_helpers import start_run, wait_for, wait_run
from tests.services import (  # noqa: F401 - fixtures
    PostgresServer,
    create_database,
    pg_private_server,
    pg_server,
    pg_server_url,
)

pytestmark = pytest.mark.postgres
T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same test on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'simple.db'}"
    return str(request.getfixturevalue("pg_server_url"))


@pytest.fixture
def any_engine(any_url: str) -> Iterator[Engine]:
    engine = create_db_engine(any_url)
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog([REPO_CATALOG_DIR])


def new_run(engine: Engine, catalog: Catalog, templates: list[str]) -> tuple[str, dict[str, str]]:
    """A run of `templates` with every sandbox running; its id and {sandbox id: token}."""
    body = {"templates": templates}
    run_id, _ = create_run(engine, catalog, PlanRequest(templates=tuple(templates)), body,
                           backend="process", default_image="simple-sandbox:test")
    tokens: dict[str, str] = {}
    with engine.begin() as conn:
        for row in conn.execute(select(sandboxes.c.id).where(sandboxes.c.run_id == run_id)):
            tokens[row.id] = f"token-{row.id}"
            conn.execute(update(sandboxes).where(sandboxes.c.id == row.id).values(
                status="running", attempt=1, token_hash=hash_token(tokens[row.id]),
                launched_at=T0))
    return run_id, tokens


# --- migrations and readiness ------------------------------------------------------------


def test_migrations_apply_and_are_idempotent(pg_server_url: str) -> None:
    engine = create_db_engine(pg_server_url)
    with pytest.raises(UnavailableError, match="not migrated"):
        check_ready(engine)
    upgrade(engine)
    upgrade(engine)
    check_ready(engine)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() == \
            head_revision()
        assert conn.exec_driver_sql(
            "SELECT data_type FROM information_schema.columns "
            "WHERE table_name = 'events' AND column_name = 'id'").scalar() == "bigint"
    engine.dispose()


def test_readyz_says_not_migrated_until_db_upgrade(pg_server_url: str, tmp_path: Path) -> None:
    controller = Controller(Settings(data_dir=tmp_path / "data", database_url=pg_server_url))
    try:
        with TestClient(
            create_app(controller, manage_lifecycle=False), base_url="http://127.0.0.1"
        ) as http:
            response = http.get("/readyz")
            assert response.status_code == 503
            assert "not migrated" in response.json()["error"]["message"]
            assert "simplectl db upgrade" in response.json()["error"]["hint"]
            simplectl = Path(sys.executable).with_name("simplectl")
            subprocess.run([str(simplectl), "db", "upgrade"], check=True, timeout=120,
                           env={**os.environ, "SIMPLE_DATABASE_URL": pg_server_url})
            ready = http.get("/readyz").json()
            assert (ready["status"], ready["detail"]) == ("ready", None)
            assert ready["leader"]["role"] == "all" and ready["leader"]["leading"] is True
    finally:
        controller.close()


def test_outage_mid_run_is_reported_and_recovered(pg_private_server: PostgresServer,
                                                  tmp_path: Path) -> None:
    """The server stops while sandboxes run: /readyz says unreachable, nothing is lost."""
    url = create_database(pg_private_server.url)
    settings = Settings(data_dir=tmp_path / "data", database_url=url, retry_base_s=0.05,
                        retry_max_s=0.2, reconcile_interval_s=0.2, lost_grace_s=30.0)
    with EmbeddedServer(settings) as server:
        assert httpx.get(f"{server.url}/readyz").status_code == 200
        run_id = start_run(server.url, {"names": ["quick"], "max_parallel": 7})
        wait_for(lambda: any(s["step"] for s in
                             httpx.get(f"{server.url}/v1/runs/{run_id}").json()["sandboxes"]),
                 what="a sandbox reporting progress")
        pg_private_server.stop()
        try:
            response = httpx.get(f"{server.url}/readyz", timeout=30)
            assert response.status_code == 503
            assert "unreachable" in response.json()["error"]["message"]
            time.sleep(2)  # sandboxes keep running and their events are refused meanwhile
        finally:
            pg_private_server.start()
        wait_for(lambda: httpx.get(f"{server.url}/readyz", timeout=30).status_code == 200,
                 timeout_s=30, what="/readyz to recover")
        run = wait_run(server.url, run_id, timeout_s=180)
        assert run["status"] == "succeeded", run
        assert [s["status"] for s in run["sandboxes"]] == ["succeeded"] * 7
        report = httpx.get(f"{server.url}/v1/runs/{run_id}/report").json()
        assert report["totals"]["succeeded"] == 7 and report["totals"]["cost_usd"] > 0


# --- ingestion: the same answers as on SQLite --------------------------------------------


def incoming(event_id: str, seq: int, step: int | None = None,
             kind: EventType = EventType.PROGRESS, **data: Any) -> IncomingEvent:
    if step is not None:
        data["step"] = step
    return IncomingEvent(event_id, seq, kind, T0 + timedelta(seconds=seq), data)


def ingest_scenario(engine: Engine, catalog: Catalog) -> list[Any]:
    """Every case of the contract, through the group writer; the answers and what is stored."""
    run_id, tokens = new_run(engine, catalog, ["board_meeting", "kami_shrine"])
    (a, token_a), (b, token_b) = sorted(tokens.items())
    started = incoming("e0", 1, kind=EventType.STARTED, attempt=1)
    groups = [
        [EventRequest(a, f"Bearer {token_a}", [started, incoming("e1", 2, 1, cost_usd=1.5)]),
         EventRequest(a, f"Bearer {token_a}", [incoming("e1", 2, 1, cost_usd=1.5)]),  # replay
         EventRequest(a, f"Bearer {token_a}", [incoming("e1", 2, 2)]),  # same id, other body
         EventRequest(b, f"Bearer {token_b}", [incoming("f1", 1, 1, tokens=10)]),
         EventRequest(b, f"Bearer {token_a}", [incoming("f2", 2, 2)]),  # a's token: 403
         EventRequest(b, "Bearer nope", [incoming("f2", 2, 2)]),  # 401
         EventRequest("sbx-unknown", "Bearer nope", [incoming("g1", 1)]),  # 401
         EventRequest(b, None, [incoming("f2", 2, 2)])],  # 401
        [EventRequest(a, f"Bearer {token_a}", [incoming("e2", 3, 3), incoming("e1", 2, 1,
                                                                             cost_usd=1.5)]),
         EventRequest(a, f"Bearer {token_a}", [incoming("e3", 4, 4), incoming("e3", 4, 5)]),
         EventRequest(b, f"Bearer {token_b}", [incoming("f1", 1, 1, tokens=10),
                                               incoming("f2", 2, 2, tokens=20)])],
    ]
    answers: list[Any] = []
    for group in groups:
        with engine.begin() as conn:
            write_group(conn, group)
        answers += [r.answer if r.error is None else
                    (r.error.status_code, r.error.message.replace(a, "A").replace(b, "B"))
                    for r in group]
    with engine.connect() as conn:
        stored = sorted(tuple(r) for r in conn.execute(
            select(events.c.sandbox_id, events.c.event_id, events.c.seq, events.c.type)))
        progress = sorted(tuple(r) for r in conn.execute(
            select(sandboxes.c.id, sandboxes.c.last_seq, sandboxes.c.step, sandboxes.c.cost_usd,
                   sandboxes.c.tokens, sandboxes.c.started_at.is_not(None))
            .where(sandboxes.c.run_id == run_id)))
    # Sandbox ids are random per run: compare what the two sandboxes went through.
    return [answers, [r[1:] for r in stored], [r[1:] for r in progress]]


def test_ingestion_answers_as_on_sqlite(any_engine: Engine, catalog: Catalog,
                                        tmp_path: Path) -> None:
    sqlite_engine = create_db_engine(f"sqlite:///{tmp_path / 'reference.db'}")
    upgrade(sqlite_engine)
    expected = ingest_scenario(sqlite_engine, catalog)
    answers, stored, progress = ingest_scenario(any_engine, catalog)
    assert [answers, stored, progress] == expected
    assert [a if isinstance(a, tuple) else 200 for a in answers] == [
        200, 200, (409, "event e1 was already received with a different body"), 200,
        (403, answers[4][1]), (401, answers[5][1]), (401, answers[6][1]), (401, answers[7][1]),
        200, (409, "the batch repeats event id e3 with different bodies"), 200]
    assert [r[0] for r in stored] == ["e0", "e1", "e2", "f1", "f2"]  # e3: its batch conflicts


def test_concurrent_batches_are_stored_exactly_once(any_url: str, catalog: Catalog,
                                                    tmp_path: Path) -> None:
    """64 senders through the real route, each batch sent twice: all stored, once."""
    settings = Settings(data_dir=tmp_path / "data", database_url=any_url)
    controller = Controller(settings)
    upgrade(controller.engine)
    run_id, tokens = new_run(controller.engine, catalog, list(catalog.templates)[:64])
    answers: list[int] = []

    def send(sandbox_id: str, token: str, http: TestClient) -> None:
        for seq in range(1, 11, 2):
            body = {"events": [{"id": f"{sandbox_id}-{n}", "seq": n, "type": "progress",
                                "time": "2026-11-21T12:00:00Z", "data": {"step": n}}
                               for n in (seq, seq + 1)]}
            for _ in range(2):
                answers.append(http.post(f"/v1/sandboxes/{sandbox_id}/events", json=body,
                                         headers={"Authorization": f"Bearer {token}"})
                               .status_code)

    try:
        with TestClient(
            create_app(controller, manage_lifecycle=False), base_url="http://127.0.0.1"
        ) as http:
            threads = [threading.Thread(target=send, args=(s, t, http))
                       for s, t in tokens.items()]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        with controller.engine.connect() as conn:
            count = conn.execute(select(func.count()).select_from(events)
                                 .where(events.c.run_id == run_id)).scalar()
            last = {tuple(r) for r in conn.execute(
                select(sandboxes.c.last_seq, sandboxes.c.step).where(sandboxes.c.run_id == run_id))}
    finally:
        controller.close()
    assert answers == [200] * (len(tokens) * 10)
    assert count == len(tokens) * 10
    assert last == {(10, 10)}


# --- aggregation with COPY ---------------------------------------------------------------


def write_snapshot(path: Path, run_id: str, template_id: str, steps: int, seed: int,
                   mechanisms: list[str], step_value: int | None = None) -> bytes:
    rng = random.Random(seed)
    conn = sqlite3.connect(path)
    conn.executescript(SNAPSHOT_SCHEMA_SQL)
    rows = [(run_id, n if step_value is None else step_value, rng.randint(1, 900),
             rng.randint(1, 9), rng.randint(0, 2), round(rng.uniform(0, 0.2), 6),
             rng.randint(0, 500)) for n in range(1, steps + 1)]
    conn.executemany("INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    conn.execute("INSERT INTO runs VALUES (?, ?, 'completed', '2026-11-21T12:00:00Z', "
                 "'2026-11-21T12:05:00Z', ?, ?, ?, ?, ?, ?)",
                 (run_id, template_id, round(sum(r[5] for r in rows), 6),
                  sum(r[6] for r in rows), steps, rng.randint(1, 9), steps,
                  json.dumps(mechanisms)))
    conn.commit()
    conn.close()
    return path.read_bytes()


def test_copy_load_is_idempotent_and_exact(pg_server_url: str, catalog: Catalog,
                                           tmp_path: Path) -> None:
    engine = create_db_engine(pg_server_url)
    upgrade(engine)
    run_id, tokens = new_run(engine, catalog, ["board_meeting"])
    [sandbox_id] = tokens
    data = write_snapshot(tmp_path / "a.sqlite", sandbox_id, "board_meeting", 5000, 1, ["M1"])
    rows = read_snapshot(data, 10**8)
    for _ in range(3):
        with engine.begin() as conn:
            load_snapshot(conn, run_id, sandbox_id, rows)
    with engine.connect() as conn:
        loaded = [tuple(r) for r in conn.execute(
            select(result_steps.c.snapshot_run_id, result_steps.c.step,
                   result_steps.c.duration_ms, result_steps.c.actions, result_steps.c.failures,
                   result_steps.c.cost_usd, result_steps.c.tokens)
            .order_by(result_steps.c.step))]
        assert conn.execute(select(func.count()).select_from(result_runs)).scalar() == 1
    assert loaded == rows.steps
    smaller = read_snapshot(write_snapshot(tmp_path / "b.sqlite", sandbox_id, "board_meeting",
                                           10, 2, ["M3"]), 10**8)
    with engine.begin() as conn:
        load_snapshot(conn, run_id, sandbox_id, smaller)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(result_steps)).scalar() == 10
    engine.dispose()


def test_values_postgresql_cannot_hold_are_rejected_before_loading(tmp_path: Path) -> None:
    data = write_snapshot(tmp_path / "a.sqlite", "r1", "board_meeting", 1, 1, ["M1"],
                          step_value=2**31)
    with pytest.raises(SnapshotRejected, match=r"steps\.step"):
        read_snapshot(data, 10**8)


# --- report SQL --------------------------------------------------------------------------


def loaded_report(engine: Engine, catalog: Catalog, tmp_path: Path) -> dict[str, Any]:
    templates = ["board_meeting", "hospital_crisis", "jefferson_dinner", "kami_shrine",
                 "vc_pitch_pearl"]
    run_id, _ = new_run(engine, catalog, templates)
    with engine.connect() as conn:
        by_template = {r.template_id: r.id for r in conn.execute(
            select(sandboxes.c.id, sandboxes.c.template_id).where(sandboxes.c.run_id == run_id))}
    mechanisms = [["M1", "M7", "M11"], ["M1", "M8", "M14"], ["M3", "M7"], ["M16"], []]
    for n, template_id in enumerate(templates[:-1]):
        sandbox_id = by_template[template_id]
        data = write_snapshot(tmp_path / f"{engine.dialect.name}-{n}.sqlite", sandbox_id,
                              template_id, 50 + n, n, mechanisms[n])
        with engine.begin() as conn:
            load_snapshot(conn, run_id, sandbox_id, read_snapshot(data, 10**8))
            conn.execute(update(sandboxes).where(sandboxes.c.id == sandbox_id).values(
                status="succeeded", exit_code=0, finished_at=T0 + timedelta(seconds=n)))
    with engine.begin() as conn:
        conn.execute(update(sandboxes).where(sandboxes.c.id == by_template["vc_pitch_pearl"])
                     .values(status="failed", exit_code=1, error="no snapshot"))
    report = fetch_report(engine, run_id)
    # Ids and creation times differ between the two databases; the rest must not.
    for key in ("run_id", "created_at", "finished_at"):
        report.pop(key)
    for sandbox in report["sandboxes"]:
        sandbox.pop("sandbox_id")
    return report


def test_report_sql_equals_sqlite(pg_server_url: str, catalog: Catalog, tmp_path: Path) -> None:
    sqlite_engine = create_db_engine(f"sqlite:///{tmp_path / 'reference.db'}")
    pg_engine = create_db_engine(pg_server_url)
    for engine in (sqlite_engine, pg_engine):
        upgrade(engine)
    expected = loaded_report(sqlite_engine, catalog, tmp_path)
    actual = loaded_report(pg_engine, catalog, tmp_path)
    assert json.loads(json.dumps(actual)) == actual  # plain JSON types, no Decimal
    assert _approx_equal(actual, expected)
    assert actual["totals"]["tokens_used"] > 0
    assert [m["mechanism"] for m in actual["by_mechanism"]] == \
        [m["mechanism"] for m in expected["by_mechanism"]]
    pg_engine.dispose()


def _approx_equal(actual: Any, expected: Any) -> bool:
    """Equal, floats to 1e-9 relative (the databases may add in another order)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys()
        return all(_approx_equal(actual[k], expected[k]) for k in expected)
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected)
        return all(_approx_equal(a, e) for a, e in zip(actual, expected, strict=True))
    if isinstance(expected, float):
        assert actual == pytest.approx(expected, rel=1e-9)
        return True
    assert actual == expected
    return True
