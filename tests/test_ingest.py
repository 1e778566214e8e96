"""The event contract's edges, and what a new attempt resets and when a retry comes.

Replays are never punished: an identical repeat inside one batch is one event, and an
exact replay after the sandbox ended gets its stored answer (a new event does not).
A new attempt numbers its events from 1 again (`last_seq` reset). A retry waits the
controller's capped exponential backoff (`next_attempt_at`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update

from controller.attempts.finisher import Finisher, Outcome
from controller.attempts.launcher import Launcher
from controller.db.engine import upgrade
from controller.db.schema import attempts, events, runs, sandboxes
from controller.intake.event_batch import EventRequest, IncomingEvent
from controller.intake.event_writer import WRITER_LINGER_S
from controller.intake.ingest import write_group
from controller.intake.tokens import hash_token
from controller.planning.model import PlanRequest
from controller.retry import backoff_ceiling_s, backoff_s
from controller.runs import create_run
from controller.service import Controller
from controller.settings import Settings
from controller.states import SandboxStatus
from sandbox_image.contract import EventType

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


@pytest.fixture
def controller(settings: Settings) -> Iterator[Controller]:
    controller = Controller(settings)
    upgrade(controller.engine)
    yield controller
    controller.close()


@pytest.fixture
def sandbox(controller: Controller) -> tuple[str, str]:
    """One running sandbox (attempt 1): its id and token."""
    body = {"templates": ["board_meeting"]}
    run_id, _ = create_run(controller.engine, controller.catalog,
                           PlanRequest(templates=("board_meeting",)), body,
                           backend="process", default_image="simple-sandbox:test")
    with controller.engine.begin() as conn:
        sandbox_id = conn.execute(
            select(sandboxes.c.id).where(sandboxes.c.run_id == run_id)).scalar_one()
        conn.execute(update(sandboxes).where(sandboxes.c.id == sandbox_id).values(
            status="running", attempt=1, token_hash=hash_token("tok"), launched_at=T0))
        conn.execute(attempts.insert().values(
            sandbox_id=sandbox_id, attempt=1, status="running", started_at=T0))
    return sandbox_id, "tok"


def event(event_id: str, seq: int, **data: Any) -> IncomingEvent:
    return IncomingEvent(event_id, seq, EventType.PROGRESS, T0 + timedelta(seconds=seq), data)


def post(controller: Controller, sandbox_id: str, token: str,
         batch: list[IncomingEvent]) -> tuple[int, Any]:
    request = EventRequest(sandbox_id, f"Bearer {token}", batch)
    with controller.engine.begin() as conn:
        write_group(conn, [request])
    if request.error is not None:
        return request.error.status_code, request.error.message
    return 200, request.answer


def stored(controller: Controller, sandbox_id: str) -> list[str]:
    with controller.engine.connect() as conn:
        return list(conn.execute(select(events.c.event_id).where(
            events.c.sandbox_id == sandbox_id).order_by(events.c.seq)).scalars())


def end(controller: Controller, sandbox_id: str) -> None:
    with controller.engine.begin() as conn:
        conn.execute(update(sandboxes).where(sandboxes.c.id == sandbox_id).values(
            status="succeeded"))


def test_an_identical_repeat_in_one_batch_is_one_event(
    controller: Controller, sandbox: tuple[str, str]
) -> None:
    sandbox_id, token = sandbox
    code, answer = post(controller, sandbox_id, token, [event("a", 1), event("a", 1)])
    assert code == 200, answer
    assert answer == {"stored": ["a", "a"], "count": 2}
    assert stored(controller, sandbox_id) == ["a"]
    code, message = post(controller, sandbox_id, token, [event("b", 2), event("b", 2, step=9)])
    assert (code, message) == (409, "the batch repeats event id b with different bodies")
    assert stored(controller, sandbox_id) == ["a"]


def test_a_replay_after_the_end_gets_its_stored_answer(
    controller: Controller, sandbox: tuple[str, str]
) -> None:
    sandbox_id, token = sandbox
    first = post(controller, sandbox_id, token, [event("a", 1), event("b", 2)])
    assert first[0] == 200
    end(controller, sandbox_id)
    assert post(controller, sandbox_id, token, [event("a", 1), event("b", 2)]) == first
    assert post(controller, sandbox_id, token, [event("b", 2)])[0] == 200
    for batch in ([event("c", 3)], [event("b", 2), event("c", 3)], [event("b", 2, step=1)]):
        code, message = post(controller, sandbox_id, token, batch)
        assert code == 401 and "stopped working" in message, batch
    assert post(controller, sandbox_id, "other-token", [event("a", 1)])[0] == 401
    assert stored(controller, sandbox_id) == ["a", "b"]


def test_a_new_attempt_starts_its_seq_again(
    controller: Controller, sandbox: tuple[str, str]
) -> None:
    sandbox_id, token = sandbox
    assert post(controller, sandbox_id, token, [event(f"e{n}", n) for n in range(1, 6)])[0] == 200
    with controller.engine.begin() as conn:
        conn.execute(update(sandboxes).where(sandboxes.c.id == sandbox_id).values(
            status="pending"))
        row = conn.execute(select(sandboxes).where(sandboxes.c.id == sandbox_id)).one()
        run = conn.execute(select(runs).where(runs.c.id == row.run_id)).one()
    assert row.last_seq == 5
    launcher = Launcher(controller.engine, controller.backend, controller.store,
                        controller.settings, controller.urls, controller.finisher)
    claim = launcher.claim(run, row, T0)
    assert claim is not None and claim.row.attempt == 2 and claim.row.last_seq == 0
    token2 = claim.spec.env.sandbox_token
    assert post(controller, sandbox_id, token2, [event("n1", 1)])[0] == 200
    with controller.engine.connect() as conn:
        last_seq = conn.execute(
            select(sandboxes.c.last_seq).where(sandboxes.c.id == sandbox_id)).scalar()
        by_attempt = dict(conn.execute(select(events.c.attempt, func.max(events.c.seq)).where(
            events.c.sandbox_id == sandbox_id).group_by(events.c.attempt)).all())
    assert last_seq == 1, "the new attempt's progress, not the old attempt's"
    assert by_attempt == {1: 5, 2: 1}
    code, _ = post(controller, sandbox_id, token, [event("late", 6)])
    assert code == 401, "the first attempt's token died with it"


def test_backoff_grows_doubling_to_its_cap_with_jitter_under_it() -> None:
    ceilings = [backoff_ceiling_s(n, 0.5, 6.0) for n in range(1, 7)]
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 6.0, 6.0]
    assert backoff_ceiling_s(10_000, 0.5, 6.0) == 6.0, "no overflow for a huge attempt"
    assert backoff_s(3, 0.5, 6.0, lambda: 0.0) == 0.0
    assert backoff_s(3, 0.5, 6.0, lambda: 0.5) == 1.0
    assert backoff_s(3, 0.5, 6.0, lambda: 0.0, equal_jitter=True) == 1.0
    assert backoff_s(3, 0.5, 6.0, lambda: 0.999, equal_jitter=True) == pytest.approx(2.0, 0.01)
    delays = [backoff_s(4, 0.5, 6.0) for _ in range(200)]
    assert all(0 <= d <= 4.0 for d in delays) and len(set(delays)) > 100


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_a_transient_failure_is_retried_after_the_backoff(
    controller: Controller, sandbox: tuple[str, str], attempt: int
) -> None:
    sandbox_id, _ = sandbox
    settings = controller.settings.model_copy(
        update={"retry_base_s": 2.0, "retry_max_s": 5.0, "max_attempts": 5})
    with controller.engine.begin() as conn:
        conn.execute(update(sandboxes).where(sandboxes.c.id == sandbox_id).values(
            attempt=attempt))
        conn.execute(update(attempts).where(attempts.c.sandbox_id == sandbox_id).values(
            attempt=attempt))
        row = conn.execute(select(sandboxes).where(sandboxes.c.id == sandbox_id)).one()
    outcome = Outcome(SandboxStatus.FAILED, 1, "flaky", transient=True)
    finisher = Finisher(controller.engine, controller.backend, controller.store, settings)
    finisher.finish(row, outcome, T0, random.Random(7))
    with controller.engine.connect() as conn:
        after = conn.execute(select(sandboxes).where(sandboxes.c.id == sandbox_id)).one()
    expected = random.Random(7).random() * min(5.0, 2.0 * 2 ** (attempt - 1))
    assert after.status == SandboxStatus.PENDING
    assert after.next_attempt_at == T0 + timedelta(seconds=expected)


def test_closing_the_event_writer_writes_what_is_queued_and_ends_its_thread(
    controller: Controller, sandbox: tuple[str, str]
) -> None:
    sandbox_id, token = sandbox
    writer = controller.event_writer
    before = set(threading.enumerate())
    future = writer.submit(EventRequest(sandbox_id, f"Bearer {token}", [event("a", 1)]))
    (thread,) = [t for t in threading.enumerate() if t not in before and t.name == "event-writer"]
    started = time.monotonic()
    writer.close()
    assert time.monotonic() - started < WRITER_LINGER_S, "woken, not left to its idle wait"
    assert not thread.is_alive()
    assert future.result(timeout=0) == {"stored": ["a"], "count": 1}
    assert stored(controller, sandbox_id) == ["a"]
    later = writer.submit(EventRequest(sandbox_id, f"Bearer {token}", [event("b", 2)]))
    assert later.result(timeout=10) == {"stored": ["b"], "count": 1}, "a closed writer restarts"
    writer.close()
