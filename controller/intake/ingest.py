"""Event ingestion: the controller's side of the sandbox event protocol.

Each `(sandbox, event id)` is stored exactly once; a replay gets the same answer;
the same id with another body is a conflict and stores nothing of its batch.
The batch is committed before the answer is sent. Progress shows on the
sandbox row in the same transaction.

`write_group` stores many requests' batches in one transaction, each request
judged on its own (401/403/409 fail only that request); `controller.intake.event_writer`
calls it by group commit. The SQL is in `controller.intake.event_rows`, the batch
itself in `controller.intake.event_batch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import DataError, SQLAlchemyError

from controller.db.schema import sandboxes
from controller.errors import (
    ConflictError,
    ForbiddenError,
    InputError,
    NotFoundError,
    SimpleError,
    UnauthorizedError,
    UnavailableError,
)
from controller.intake import event_rows
from controller.intake.event_batch import (
    EventRequest,
    IncomingEvent,
    accepted,
    check_batch_ids,
)
from controller.intake.tokens import TokenHolder, token_holder
from controller.states import SandboxStatus

DATABASE_RETRY_AFTER_S = 2  # Retry-After of a 503 while the database is away


def _authorize_row(
    conn: Connection, sandbox_id: str, row: Any, token: str, replay: bool = False
) -> Any:
    """The sandbox row if the token is this sandbox's current one; 401 or 403 otherwise.

    An ended sandbox's token still gets a pure `replay` (every event already stored
    with the same body) answered: at-least-once delivery is never punished.
    """
    holder = token_holder(conn, token, row.token_hash if row is not None else None)
    if holder is TokenHolder.THIS_SANDBOX:
        if row.status != SandboxStatus.RUNNING and not replay:
            raise UnauthorizedError(
                f"the token of sandbox {sandbox_id} stopped working: the sandbox has ended "
                f"({row.status})",
                hint="a sandbox may only report while it runs",
            )
        return row
    if holder is TokenHolder.ANOTHER_SANDBOX:
        raise ForbiddenError(
            f"this token belongs to another sandbox, not {sandbox_id}",
            hint="post to /v1/sandboxes/{SIMPLE_SANDBOX_ID}/events with your own id",
        )
    if row is None:
        raise UnauthorizedError(
            f"unknown sandbox {sandbox_id} or invalid token",
            hint="use SIMPLE_SANDBOX_ID and SIMPLE_SANDBOX_TOKEN as given",
        )
    raise UnauthorizedError(
        f"invalid token for sandbox {sandbox_id}",
        hint="send `Authorization: Bearer $SIMPLE_SANDBOX_TOKEN`",
    )


def _bearer(authorization: str | None) -> str:
    if not authorization:
        raise UnauthorizedError(
            "missing Authorization header",
            hint="send `Authorization: Bearer $SIMPLE_SANDBOX_TOKEN`",
        )
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthorizedError(
            "Authorization header is not `Bearer <token>`",
            hint="send `Authorization: Bearer $SIMPLE_SANDBOX_TOKEN`",
        )
    return token.strip()


def write_group(conn: Connection, requests: Sequence[EventRequest]) -> None:
    """Judge and store every request inside the caller's transaction; set answers/errors."""
    ids = sorted({r.sandbox_id for r in requests})
    keys = [(r.sandbox_id, i) for r in requests for i in r.hashes]
    rows, known = event_rows.lookup(conn, ids, keys)
    fresh_rows: list[dict[str, Any]] = []
    fresh_by_sandbox: dict[str, tuple[Any, list[IncomingEvent]]] = {}
    now = datetime.now(UTC)
    for request in requests:
        request.answer = request.error = None
        try:
            stored = known.setdefault(request.sandbox_id, {})
            row = _authorize_row(
                conn,
                request.sandbox_id,
                rows.get(request.sandbox_id),
                _bearer(request.authorization),
                replay=_is_replay(request, stored),
            )
            check_batch_ids(request)
            fresh = _fresh_events(request, stored)
        except SimpleError as e:
            request.error = e
            continue
        fresh_rows += [_event_values(row, e, request.hashes[e.id], now) for e in fresh]
        request.stored_count = len(fresh)
        if fresh:
            fresh_by_sandbox.setdefault(row.id, (row, []))[1].extend(fresh)
        request.answer = accepted(request.batch)
    if fresh_rows:
        progress = [
            event_rows.progress_values(row, fresh) for row, fresh in fresh_by_sandbox.values()
        ]
        event_rows.store(conn, fresh_rows, progress)


def _event_values(row: Any, event: IncomingEvent, body_hash: str, now: datetime) -> dict[str, Any]:
    """The `events` row of a fresh event of the sandbox `row`."""
    return {
        "sandbox_id": row.id,
        "run_id": row.run_id,
        "event_id": event.id,
        "attempt": row.attempt,
        "seq": event.seq,
        "type": event.type.value,
        "time": event.time,
        "data": event.data,
        "body_hash": body_hash,
        "received_at": now,
    }


def _is_replay(request: EventRequest, known: dict[str, str]) -> bool:
    """Every event of the batch is already stored with the same body."""
    return all(known.get(i) == h for i, h in request.hashes.items())


def _fresh_events(request: EventRequest, known: dict[str, str]) -> list[IncomingEvent]:
    """The batch's events not stored yet; 409 if one is known with another body.

    `known` (this sandbox's stored ids and hashes) learns the fresh ones, so a later
    request of the same group sees them as stored.
    """
    changed = [i for i, h in request.hashes.items() if i in known and known[i] != h]
    if changed:
        raise ConflictError(
            f"event {changed[0]} was already received with a different body",
            hint="an event id is sent again only as an exact replay; use a new id",
        )
    fresh: dict[str, IncomingEvent] = {}  # an identical repeat in the batch is one event
    for event in request.batch:
        if event.id not in known:
            fresh.setdefault(event.id, event)
    known.update((event_id, request.hashes[event_id]) for event_id in fresh)
    return list(fresh.values())


# What judging and writing a batch needs of the sandbox row (not its JSON spec).
def write_alone(engine: Engine, request: EventRequest) -> None:
    """One request in its own transaction; a database failure becomes its error."""
    try:
        with engine.begin() as conn:
            write_group(conn, [request])
    except SQLAlchemyError as e:
        fail_request(request, e)


def fail_request(request: EventRequest, e: SQLAlchemyError) -> None:
    request.answer = None
    request.stored_count = 0
    if isinstance(e, DataError):
        request.error = InputError(
            f"the batch holds a value the database cannot store: {first_line(e)}",
            hint="send UTF-8 text without NUL characters, and numbers in range",
        )
    else:
        request.error = UnavailableError(
            f"events not stored: database error: {first_line(e)}",
            hint="retry later; the controller recovers when the database does",
            retry_after_s=DATABASE_RETRY_AFTER_S,
        )


def first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def load_sandbox(engine: Engine, sandbox_id: str) -> Any:
    with engine.connect() as conn:
        row = conn.execute(select(sandboxes).where(sandboxes.c.id == sandbox_id)).first()
    if row is None:
        raise NotFoundError(f"unknown sandbox {sandbox_id}", hint="see `simplectl status RUN`")
    return row
