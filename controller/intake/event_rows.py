"""The SQL of event ingestion: the group's sandboxes and already-known event ids read,
its new events and the sandboxes' progress written.

On PostgreSQL a group costs three round trips: the sandboxes and the known ids
(pipelined), the rows and the progress (pipelined, each one statement with one array
per column), and the commit. On SQLite, the same with plain statements.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    Boolean,
    Connection,
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
from sqlalchemy.exc import DBAPIError

from controller.db.schema import UTCDateTime, events, sandboxes
from controller.intake.event_batch import IncomingEvent
from sandbox_image.contract import EventType

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



def lookup(
    conn: Connection, ids: Sequence[str], keys: Sequence[tuple[str, str]]
) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """The rows of the sandboxes `ids`, and the stored body hash of each of the event
    `keys` (sandbox id, event id) already stored, by sandbox."""
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


def store(conn: Connection, rows: list[dict[str, Any]], progress: list[dict[str, Any]]) -> None:
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
