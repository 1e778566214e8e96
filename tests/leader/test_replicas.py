# ruff: noqa: F811 - the fixtures imported from tests.services are parameters here
"""What a client sees is the same from any API replica: a chat carried on by another
replica, an Idempotency-Key honoured by another, event quotas counted across replicas."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert

from controller.api.app import create_app
from controller.catalog.batches import WorkItem
from controller.catalog.stages import Policy, PolicyKind, Stage
from controller.db.engine import create_db_engine, upgrade
from controller.db.schema import attempts, runs, sandboxes
from controller.errors import PayloadTooLargeError, QuotaExceededError
from controller.intake.event_quota import EventQuota
from controller.planning.model import PlanRequest, Priority
from controller.principal.stored import decode_request, encode_request
from controller.service import Controller
from controller.settings import Settings
from tests.services import pg_server, pg_server_url  # noqa: F401 - fixtures


def test_a_plan_request_survives_the_database_whole() -> None:
    request = PlanRequest(
        names=("quick",), suites=("full",), templates=("a", "b"), categories=("c",),
        query="run quick under $5", budget_usd=5.0, priority=Priority.SPEED, max_parallel=3,
        items=(WorkItem("i1", {"x": 1}), WorkItem("i2", [1, 2])), batch_size=2,
        stages=(Stage(("a",), Policy(PolicyKind.ALL)),
                Stage(("b", "c"), Policy(PolicyKind.QUORUM, 1))),
        exclude=("d",), max_runtime_s=60.0)
    back = decode_request(encode_request(request))
    assert back == request
    assert back is not None and [i.data for i in back.items or ()] == [{"x": 1}, [1, 2]]


@pytest.fixture
def replicas(settings: Settings, pg_server_url: str) -> Iterator[list[TestClient]]:
    shared = settings.model_copy(update={
        "database_url": pg_server_url, "role": "api", "api_tokens": ["t1"],
        "confirm_above_usd": 0.01, "signing_key": "k" * 32})
    clients = [TestClient(create_app(Controller(shared)), base_url="http://localhost",
                          headers={"Authorization": "Bearer t1"}) for _ in range(2)]
    for client in clients:
        client.__enter__()
    yield clients
    for client in clients:
        client.__exit__(None, None, None)


@pytest.mark.postgres
def test_a_chat_begun_on_one_replica_is_confirmed_on_the_other(
    replicas: list[TestClient],
) -> None:
    one, two = replicas
    asked = one.post("/v1/chat", json={"message": "run quick"}).json()
    assert asked["kind"] == "confirm" and asked["needs_confirmation"], asked
    done = two.post("/v1/chat", json={"message": "yes",
                                       "conversation_id": asked["conversation_id"]}).json()
    assert done["kind"] == "started", done
    assert one.get(f"/v1/runs/{done['run']['run_id']}").status_code == 200
    again = one.post("/v1/chat", json={"message": "yes",
                                       "conversation_id": asked["conversation_id"]}).json()
    assert again["kind"] != "started", "the yes was spent on the other replica"


@pytest.mark.postgres
def test_an_idempotency_key_is_honoured_by_the_other_replica(
    replicas: list[TestClient],
) -> None:
    one, two = replicas
    body: dict[str, Any] = {"names": ["quick"]}
    first = one.post("/v1/runs", json=body, headers={"Idempotency-Key": "k-1"})
    retry = two.post("/v1/runs", json=body, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 201 and retry.status_code in (200, 201)
    assert retry.json()["run_id"] == first.json()["run_id"]
    other = two.post("/v1/runs", json={"names": ["full"]}, headers={"Idempotency-Key": "k-1"})
    assert other.status_code == 409


@pytest.mark.postgres
def test_event_quotas_hold_across_replicas(pg_server_url: str) -> None:
    engine = create_db_engine(pg_server_url)
    upgrade(engine)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(insert(runs).values(id="r1", status="running", request={}, plan={},
                                         max_parallel=1, created_at=now, backend="process"))
        conn.execute(insert(sandboxes).values(
            id="s1", run_id="r1", template_id="t", status="running", attempt=1, position=0,
            spec={}))
        conn.execute(insert(attempts).values(sandbox_id="s1", attempt=1, status="running"))
    a, b = (EventQuota(engine, max_events=10, max_bytes=1000, shared=True) for _ in range(2))
    for n in range(5):  # alternating replicas: 10 events in all
        (a if n % 2 else b).reserve("s1", 1, 2, 10)
    with pytest.raises(QuotaExceededError, match="has posted 10 events"):
        a.reserve("s1", 1, 1, 10)
    b.release("s1", 1, 2, 10)  # a refused request gives its reservation back
    a.reserve("s1", 1, 2, 10)
    with pytest.raises(PayloadTooLargeError, match="1000 bytes per attempt"):
        b.reserve("s1", 1, 0, 1000)
    engine.dispose()


@pytest.mark.postgres
def test_what_the_leader_records_reaches_the_stream_on_another_replica(
    replicas: list[TestClient], pg_server_url: str,
) -> None:
    """The stream polls the database: a change made elsewhere (here, written as the leader
    would) reaches a stream served by a replica that took no part in it."""
    import threading

    from sqlalchemy import update

    one, two = replicas
    run_id = one.post("/v1/runs", json={"names": ["quick"]}).json()["run_id"]
    lines: list[str] = []
    first_run = threading.Event()

    def follow() -> None:
        with two.stream("GET", f"/v1/runs/{run_id}/stream") as stream:
            for line in stream.iter_lines():
                lines.append(line)
                if line == "event: run":
                    first_run.set()
                if line == "event: end":
                    return

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert first_run.wait(20)
    engine = create_db_engine(pg_server_url)
    try:
        with engine.begin() as conn:  # what the leader writes when the run is cancelled
            conn.execute(update(sandboxes).where(sandboxes.c.run_id == run_id)
                         .values(status="skipped", finished_at=datetime.now(UTC)))
            conn.execute(update(runs).where(runs.c.id == run_id)
                         .values(status="cancelled", finished_at=datetime.now(UTC)))
    finally:
        engine.dispose()
    reader.join(timeout=20)
    assert not reader.is_alive() and lines[-1] == "event: end", lines[-5:]
    assert any('"status": "cancelled"' in line for line in lines if line.startswith("data:"))
