"""Overload: 16 senders (the runtime's own outbox and sender) against a small ingest queue.

The controller answers 429 with Retry-After while its queue is full; the senders wait and
redeliver; at the end every event of every outbox is stored exactly once and each outbox
has everything marked delivered. Runs on SQLite and on PostgreSQL (CI's second pass).
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import httpx
from sqlalchemy import func, select, update

from controller.cli.embedded import EmbeddedServer
from controller.db.schema import events, sandboxes
from controller.intake.tokens import hash_token
from controller.planning.model import PlanRequest
from controller.runs import create_run
from controller.settings import Settings
from sandbox_image.contract import EVENTS_PATH, EventType
from sandbox_image.outbox import EventSender, Outbox
from sandbox_image.retry import Backoff, Deadline
from sandbox_image.snapshot import SnapshotStore

SENDERS = 16
EVENTS_EACH = 150
QUEUE_EVENTS = 300  # three batches of 100: most of 16 concurrent posts find it full


def _running_sandboxes(server: EmbeddedServer, count: int) -> dict[str, str]:
    """`count` sandboxes marked running (no reconciler), each with a token."""
    controller = server.controller
    names = list(controller.catalog.templates)[:count]
    run_id, _ = create_run(controller.engine, controller.catalog,
                           PlanRequest(templates=tuple(names)), {"templates": names},
                           backend="process", default_image="simple-sandbox:test")
    tokens: dict[str, str] = {}
    with controller.engine.begin() as conn:
        ids = conn.execute(select(sandboxes.c.id).where(sandboxes.c.run_id == run_id)).scalars()
        for sandbox_id in list(ids):
            tokens[sandbox_id] = f"token-{sandbox_id}"
            conn.execute(update(sandboxes).where(sandboxes.c.id == sandbox_id).values(
                status="running", attempt=1, token_hash=hash_token(tokens[sandbox_id])))
    assert len(tokens) == count
    return tokens


def test_overload_gets_429_with_retry_after_then_everything_stored_once(
    settings: Settings, tmp_path: Path
) -> None:
    answers: Counter[tuple[int, str | None]] = Counter()
    lock = threading.Lock()

    def record(response: httpx.Response) -> None:
        with lock:
            answers[(response.status_code, response.headers.get("retry-after"))] += 1

    busy = settings.model_copy(update={"ingest_queue_max_events": QUEUE_EVENTS})
    with EmbeddedServer(busy, start_controller=False) as server:
        tokens = _running_sandboxes(server, SENDERS)
        outboxes, senders, clients = [], [], []
        for n, (sandbox_id, token) in enumerate(sorted(tokens.items())):
            store = SnapshotStore.create(tmp_path / f"sandbox-{n}.sqlite")
            outbox = Outbox(store)
            for step in range(EVENTS_EACH):
                outbox.append(EventType.PROGRESS, {"step": step + 1, "cost_usd": 0.001})
            client = httpx.Client(headers={"Authorization": f"Bearer {token}"},
                                  event_hooks={"response": [record]})
            url = server.url + EVENTS_PATH.format(sandbox_id=sandbox_id)
            senders.append(EventSender(outbox, client, url,
                                       backoff=Backoff(base_s=0.05, cap_s=0.5)))
            outboxes.append((sandbox_id, outbox, store))
            clients.append(client)
        for sender in senders:
            sender.start()
        left = [0] * SENDERS
        flushers = [threading.Thread(target=lambda i=i: left.__setitem__(
            i, senders[i].flush(Deadline(240)))) for i in range(SENDERS)]
        for thread in flushers:
            thread.start()
        for thread in flushers:
            thread.join()
        with server.controller.engine.connect() as conn:
            stored = Counter(conn.execute(select(events.c.sandbox_id, events.c.event_id)).all())
            total = conn.execute(select(func.count()).select_from(events)).scalar()
        sent = {(sandbox_id, p.event_id) for sandbox_id, outbox, _ in outboxes
                for p in _all(outbox)}
        for client in clients:
            client.close()
        for _, _, store in outboxes:
            store.close()

    busy_answers = {key: n for key, n in answers.items() if key[0] == 429}
    assert busy_answers, f"the queue never filled: {answers}"
    assert set(busy_answers) == {(429, "1")}, "every 429 says when to come back"
    assert not [key for key in answers if key[0] not in (200, 429)], answers
    assert left == [0] * SENDERS, "every outbox delivered"
    assert total == SENDERS * EVENTS_EACH
    assert set(stored) == sent, "every sent event stored, nothing else"
    assert set(stored.values()) == {1}, "each exactly once"


def _all(outbox: Outbox) -> list[object]:
    rows = outbox.store.read("SELECT seq, id, body, delivered FROM outbox", ())
    assert all(int(r[3]) == 1 for r in rows), "every event marked delivered"
    from sandbox_image.outbox import PendingEvent

    return [PendingEvent(int(r[0]), str(r[1]), str(r[2])) for r in rows]


def test_a_database_outage_is_503_with_retry_after(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from controller.api.app import create_app
    from controller.service import Controller
    from tests.services import free_port

    away = f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/nothing"
    controller = Controller(Settings(data_dir=tmp_path / "data", database_url=away))
    try:
        with TestClient(
            create_app(controller, manage_lifecycle=False), base_url="http://127.0.0.1"
        ) as http:
            for response in (http.get("/v1/runs"), http.post(
                    "/v1/sandboxes/sbx-1/events", headers={"Authorization": "Bearer t"},
                    json={"events": [{"id": "e1", "seq": 1, "type": "started",
                                      "time": "2026-11-23T12:00:00Z", "data": {}}]})):
                assert response.status_code == 503, response.text
                assert response.headers["retry-after"] == "2"
                assert response.json()["error"]["code"] == "unavailable"
    finally:
        controller.close()
