"""Event ingestion: the controller's side of the sandbox event protocol.

Each `(sandbox, event id)` is stored exactly once; a replay gets the same answer;
the same id with another body is a conflict and stores nothing of its batch.
The batch is committed before the answer is sent. Progress shows on the
sandbox row in the same transaction.

`write_group` stores many requests' batches in one transaction, each request
judged on its own (401/403/409 fail only that request); `controller.intake.event_writer`
calls it by group commit. On PostgreSQL a group costs three round trips: the
sandboxes and the already-known ids (pipelined), the rows and the progress
(pipelined, each one statement with one array per column), and the commit.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Connection,
    Engine,
    Float,
    Integer,
    Text,
    bindparam,
    func,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import DataError, DBAPIError, SQLAlchemyError

from controller.db.schema import UTCDateTime, events, sandboxes
from controller.errors import (
    ConflictError,
    ForbiddenError,
    InputError,
    NotFoundError,
    SimpleError,
    UnauthorizedError,
    UnavailableError,
)
from controller.intake.tokens import hash_token, token_matches
from controller.states import SandboxStatus
from sandbox_image.contract import EventType

logger = logging.getLogger(__name__)

DATABASE_RETRY_AFTER_S = 2  # Retry-After of a 503 while the database is away
PERSISTENCE_FLAG = "ingest_persistence"
"""`app.state` attribute; False makes the events route answer without storing (benchmarks only)."""


@dataclass(frozen=True)
class IncomingEvent:
    id: str
    seq: int
    type: EventType
    time: datetime
    data: dict[str, Any]

    def body_hash(self) -> str:
        canonical = json.dumps(
            {
                "id": self.id,
                "seq": self.seq,
                "type": self.type.value,
                "time": self.time.isoformat(),
                "data": self.data,
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass
class EventRequest:
    """One POST of a batch: what it asks, and (once written) its answer or error."""

    sandbox_id: str
    authorization: str | None
    batch: Sequence[IncomingEvent]
    hashes: dict[str, str] = field(init=False)
    answer: dict[str, Any] | None = None
    error: SimpleError | None = None
    stored_count: int = 0  # events of this batch that were new (not replays)

    def __post_init__(self) -> None:
        self.hashes = {e.id: e.body_hash() for e in self.batch}


def accepted(batch: Sequence[IncomingEvent]) -> dict[str, Any]:
    """The answer to a stored batch; it depends only on the batch."""
    return {"stored": [e.id for e in batch], "count": len(batch)}


def _authorize_row(
    conn: Connection, sandbox_id: str, row: Any, token: str, replay: bool = False
) -> Any:
    """The sandbox row if the token is this sandbox's current one; 401 or 403 otherwise.

    An ended sandbox's token still gets a pure `replay` (every event already stored
    with the same body) answered: at-least-once delivery is never punished.
    """
    if row is not None and token_matches(token, row.token_hash):
        if row.status != SandboxStatus.RUNNING and not replay:
            raise UnauthorizedError(
                f"the token of sandbox {sandbox_id} stopped working: the sandbox has ended "
                f"({row.status})",
                hint="a sandbox may only report while it runs",
            )
        return row
    other = conn.execute(
        select(sandboxes.c.id).where(sandboxes.c.token_hash == hash_token(token))
    ).first()
    if other is not None:
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


def _check_ids(request: EventRequest) -> None:
    """409 if the batch repeats an id with another body (an identical repeat is one event)."""
    for event in request.batch:
        if event.body_hash() != request.hashes[event.id]:
            raise ConflictError(
                f"the batch repeats event id {event.id} with different bodies",
                hint="give every event its own id; repeat one only as an exact replay",
            )


def answer_without_storing(request: EventRequest) -> dict[str, Any]:
    """Benchmarks only (persistence off): the answer, after the checks that need no database."""
    _check_ids(request)
    return accepted(request.batch)


def write_group(conn: Connection, requests: Sequence[EventRequest]) -> None:
    """Judge and store every request inside the caller's transaction; set answers/errors."""
    rows, known = _lookup(conn, requests)
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
            _check_ids(request)
            fresh = _fresh_events(request, stored)
        except SimpleError as e:
            request.error = e
            continue
        for event in fresh:
            fresh_rows.append(
                {
                    "sandbox_id": row.id,
                    "run_id": row.run_id,
                    "event_id": event.id,
                    "attempt": row.attempt,
                    "seq": event.seq,
                    "type": event.type.value,
                    "time": event.time,
                    "data": event.data,
                    "body_hash": request.hashes[event.id],
                    "received_at": now,
                }
            )
        request.stored_count = len(fresh)
        if fresh:
            fresh_by_sandbox.setdefault(row.id, (row, []))[1].extend(fresh)
        request.answer = accepted(request.batch)
    if fresh_rows:
        progress = [progress_values(row, fresh) for row, fresh in fresh_by_sandbox.values()]
        _store(conn, fresh_rows, progress)


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
_GROUP_COLUMNS = ("id", "run_id", "attempt", "status", "token_hash", "last_seq", "started_at")
# PostgreSQL: one statement per step whatever the group's size, each column one binary array
# parameter: prepared once, no per-row SQL, ids looked up one by one in the unique index
# (IN lists would be a new statement per size, and a generic plan may scan the table).
_PG_SANDBOXES = f"SELECT {', '.join(_GROUP_COLUMNS)} FROM sandboxes WHERE id = ANY(%b::varchar[])"
_PG_KNOWN_EVENTS = """
SELECT e.sandbox_id, e.event_id, e.body_hash
FROM unnest(%b::varchar[], %b::varchar[]) AS k(sandbox_id, event_id)
JOIN events AS e ON e.sandbox_id = k.sandbox_id AND e.event_id = k.event_id
"""
_EVENT_COLUMNS = (
    "sandbox_id",
    "run_id",
    "event_id",
    "attempt",
    "seq",
    "type",
    "time",
    "data",
    "body_hash",
)
_PG_INSERT_EVENTS = """
INSERT INTO events (sandbox_id, run_id, event_id, attempt, seq, type, time, data, body_hash,
                    received_at)
SELECT u.*, %b FROM unnest(%b::varchar[], %b::varchar[], %b::varchar[], %b::integer[],
                           %b::integer[], %b::varchar[], %b::timestamptz[], %b::json[],
                           %b::varchar[]) AS u
ON CONFLICT (sandbox_id, event_id) DO NOTHING
"""
_PROGRESS_KEYS = (
    "p_id",
    "p_attempt",
    "p_last_seq",
    "p_started_at",
    "p_step",
    "p_steps_total",
    "p_cost_usd",
    "p_tokens",
    "p_error",
    "p_transient",
)
_PG_UPDATE_PROGRESS = """
UPDATE sandboxes AS s
SET last_seq = u.last_seq, started_at = COALESCE(s.started_at, u.started_at),
    step = COALESCE(u.step, s.step), steps_total = COALESCE(u.steps_total, s.steps_total),
    cost_usd = COALESCE(u.cost_usd, s.cost_usd), tokens = COALESCE(u.tokens, s.tokens),
    error = COALESCE(u.error, s.error), transient = COALESCE(u.transient, s.transient)
FROM unnest(%b::varchar[], %b::integer[], %b::integer[], %b::timestamptz[], %b::integer[],
            %b::integer[], %b::float8[], %b::integer[], %b::text[], %b::boolean[])
     AS u(id, attempt, last_seq, started_at, step, steps_total, cost_usd, tokens, error,
          transient)
WHERE s.id = u.id AND s.attempt = u.attempt
"""
# SQLite: the same update, executemany.
_PROGRESS_UPDATE = (
    update(sandboxes)
    .where(sandboxes.c.id == bindparam("p_id"), sandboxes.c.attempt == bindparam("p_attempt"))
    .values(
        last_seq=bindparam("p_last_seq"),
        started_at=func.coalesce(
            sandboxes.c.started_at, bindparam("p_started_at", type_=UTCDateTime())
        ),
        step=func.coalesce(bindparam("p_step", type_=Integer), sandboxes.c.step),
        steps_total=func.coalesce(
            bindparam("p_steps_total", type_=Integer), sandboxes.c.steps_total
        ),
        cost_usd=func.coalesce(bindparam("p_cost_usd", type_=Float), sandboxes.c.cost_usd),
        tokens=func.coalesce(bindparam("p_tokens", type_=Integer), sandboxes.c.tokens),
        error=func.coalesce(bindparam("p_error", type_=Text), sandboxes.c.error),
        transient=func.coalesce(bindparam("p_transient", type_=Boolean), sandboxes.c.transient),
    )
)


def _lookup(
    conn: Connection, requests: Sequence[EventRequest]
) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """The sandbox rows, and the stored body hash of each event id, by sandbox."""
    ids = sorted({r.sandbox_id for r in requests})
    keys = [(r.sandbox_id, i) for r in requests for i in r.hashes]
    found: Any
    if conn.dialect.name == "postgresql":
        from psycopg.rows import namedtuple_row

        with _driver(conn) as driver, driver.pipeline():
            rows_cursor = driver.cursor(row_factory=namedtuple_row)
            rows_cursor.execute(_PG_SANDBOXES, [ids])
            known_cursor = driver.cursor()
            known_cursor.execute(_PG_KNOWN_EVENTS, [[k[0] for k in keys], [k[1] for k in keys]])
        rows, found = rows_cursor.fetchall(), known_cursor.fetchall()
    else:
        rows = conn.execute(
            select(*(sandboxes.c[c] for c in _GROUP_COLUMNS)).where(sandboxes.c.id.in_(ids))
        ).all()
        found = conn.execute(
            select(events.c.sandbox_id, events.c.event_id, events.c.body_hash).where(
                tuple_(events.c.sandbox_id, events.c.event_id).in_(keys)
            )
        ).all()
    known: dict[str, dict[str, str]] = {}
    for sandbox_id, event_id, body_hash in found:
        known.setdefault(sandbox_id, {})[event_id] = body_hash
    return {r.id: r for r in rows}, known


def _store(conn: Connection, rows: list[dict[str, Any]], progress: list[dict[str, Any]]) -> None:
    """INSERT ... ON CONFLICT DO NOTHING (a replay racing its original is stored once),
    then the progress of each sandbox."""
    if conn.dialect.name != "postgresql":
        conn.execute(
            sqlite.insert(events).on_conflict_do_nothing(index_elements=["sandbox_id", "event_id"]),
            rows,
        )
        conn.execute(_PROGRESS_UPDATE, progress)
        return
    columns = [[r[c] for r in rows] for c in _EVENT_COLUMNS]
    columns[_EVENT_COLUMNS.index("data")] = [json.dumps(r["data"]) for r in rows]
    with _driver(conn) as driver, driver.pipeline(), driver.cursor() as cursor:
        cursor.execute(_PG_INSERT_EVENTS, [rows[0]["received_at"], *columns])
        cursor.execute(_PG_UPDATE_PROGRESS, [[v[k] for v in progress] for k in _PROGRESS_KEYS])


@contextmanager
def _driver(conn: Connection) -> Iterator[Any]:
    """psycopg's connection under `conn` (same transaction); its errors as SQLAlchemy's."""
    driver = conn.connection.driver_connection
    dbapi = conn.dialect.loaded_dbapi
    try:
        yield driver
    except dbapi.Error as e:
        raise DBAPIError.instance(None, None, e, dbapi.Error) from e


def progress_values(row: Any, fresh: list[IncomingEvent]) -> dict[str, Any]:
    """What the fresh events say about the sandbox, as the progress update's parameters.

    None keeps the column as it is; the latest event (by seq) wins. Pure.
    """
    values: dict[str, Any] = dict.fromkeys(_PROGRESS_KEYS)
    values.update(
        p_id=row.id, p_attempt=row.attempt, p_last_seq=max([row.last_seq, *(e.seq for e in fresh)])
    )
    for event in sorted(fresh, key=lambda e: e.seq):
        data = event.data
        if event.type is EventType.STARTED and row.started_at is None:
            values["p_started_at"] = event.time
        for key in ("step", "steps_total", "tokens"):
            if _is_int32(data.get(key)):
                values[f"p_{key}"] = data[key]
        if isinstance(data.get("cost_usd"), int | float):
            values["p_cost_usd"] = float(data["cost_usd"])
        if event.type is EventType.FAILED:
            error = data.get("error") or {}
            values["p_error"] = f"{error.get('type')}: {error.get('message')}"
            values["p_transient"] = bool(error.get("transient"))
    return values


def _is_int32(value: Any) -> bool:
    """An integer the progress columns can hold (bools are not progress)."""
    return isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31


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
