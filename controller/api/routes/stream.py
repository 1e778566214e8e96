"""Live events of a run as server-sent events, resumable with Last-Event-ID.

The stream interleaves two kinds of messages:
- `run`: the run with its sandboxes, sent first and whenever its state changes;
- `sandbox-event`: each event a sandbox posted, in the order they were stored.
Every message's `id` is the id of the last stored event it accounts for, so a
client that reconnects with `Last-Event-ID` misses no sandbox event, and gets
the run's current state at once (state is level-triggered: the latest is whole).
The stream ends with an `end` message once the run is over.
While the run goes, a `notice` message says when a sandbox needs attention (past
1.5x its runtime estimate, above its max cost estimate, repeated transient errors;
see `controller.principal.notices`), once per sandbox and kind per connection.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query
from fastapi.responses import StreamingResponse
from pydantic import Field
from sqlalchemy import Engine, select

from controller.api.deps import Authorized, ControllerDep
from controller.api.responses import ID_PATTERN, Public, Timestamp, error_responses
from controller.catalog.templates import Catalog
from controller.db.schema import events
from controller.principal.notices import run_notices
from controller.runs import get_run
from controller.states import ACTIVE_RUN, RunStatus


class StreamedEvent(Public):
    """`data` of a `sandbox-event` message: one event a sandbox posted, as stored."""

    id: int = Field(description="Its place in the run's stream (the message id)")
    sandbox_id: str
    event_id: str
    attempt: int
    seq: int
    type: str = Field(
        description="started, progress, error, completed or failed; `alert` (seq 0) is the "
        "controller's cost alert for that sandbox"
    )
    time: Timestamp
    data: dict[str, Any]


class StreamEnd(Public):
    """`data` of the `end` message: the run is over."""

    run_id: str
    status: RunStatus


router = APIRouter(prefix="/v1/runs", tags=["runs"], dependencies=[Authorized])

POLL_S = 0.25
# An event's id is taken when it is inserted but visible only at commit, so a
# later id can be seen first; events settle this long before they are streamed.
SETTLE_S = 0.5
KEEPALIVE_S = 15.0
NOTICE_EVERY_S = 2.0
BATCH = 500


def _message(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """The schema of one message (Open API 3.1: an event-stream's schema is per event)."""
    return {
        "type": "object",
        "required": ["event", "id", "data"],
        "properties": {
            "event": {"const": kind},
            "id": {"type": "string", "pattern": "^[0-9]+$"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": data,
            },
        },
    }


_NOTICE_SCHEMA = {
    "type": "object",
    "required": ["key", "kind", "run_id", "sandbox_id", "template_id", "message"],
    "properties": {
        "key": {"type": "string", "description": "kind:sandbox_id, said once per stream"},
        "kind": {"enum": ["slow", "cost", "errors"]},
        "run_id": {"type": "string"},
        "sandbox_id": {"type": "string"},
        "template_id": {"type": "string"},
        "message": {"type": "string"},
    },
}

_MESSAGE_SCHEMA = {
    "oneOf": [
        _message("run", {"$ref": "#/components/schemas/RunPublic"}),
        _message("sandbox-event", StreamedEvent.model_json_schema()),
        _message("notice", _NOTICE_SCHEMA),
        _message("end", StreamEnd.model_json_schema(ref_template="#/components/schemas/{model}")),
    ]
}


@router.get(
    "/{run_id}/stream",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {"schema": _MESSAGE_SCHEMA}},
            "description": "Server-sent events, each with an `id` (resume with Last-Event-ID): "
            "`run` (the run with its sandboxes, as GET /v1/runs/{run_id}; first, then on "
            "every change), `sandbox-event` (one event a sandbox posted, in stored order), "
            "`notice` (a sandbox needing attention: slow, over its cost estimate, repeated "
            "transient errors; once each), "
            "and `end` (`{run_id, status}`, last, once the run is over).",
        },
        **error_responses(401, 404, 422),
    },
)
async def stream_run(
    run_id: Annotated[str, Path(pattern=ID_PATTERN, description="A run id")],
    controller: ControllerDep,
    last_event_id: Annotated[
        str | None,
        Header(max_length=30, description="The `id` of the last message received"),
    ] = None,
    after: Annotated[
        int,
        Query(
            ge=0,
            le=2**63 - 1,
            description="Start after this message id (for a first connection that has "
            "seen the run up to it, e.g. a dashboard page); Last-Event-ID wins",
        ),
    ] = 0,
) -> StreamingResponse:
    """Live run state and sandbox events (SSE); resume with Last-Event-ID."""
    run, _ = await _shared_run(controller.engine, run_id)  # 404 before streaming
    if last_event_id and last_event_id.isdigit():
        after = int(last_event_id)
    return StreamingResponse(
        _messages(controller.engine, run_id, run, after, controller.catalog),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _messages(
    engine: Engine, run_id: str, run: dict[str, Any], after: int, catalog: Catalog
) -> AsyncIterator[bytes]:
    yield b"retry: 1000\n\n"
    # The run's state comes first, so a client (re)connecting sees where it stands at
    # once; its id is where the client resumed, so reconnecting with it loses nothing.
    sent_state = state = json.dumps(run, sort_keys=True)
    yield _sse("run", after, run)
    idle = 0.0
    noticed: set[str] = set()
    next_notice = 0.0
    while True:
        final = run["status"] not in ACTIVE_RUN
        # Also once the run is over: a cost overrun is still worth saying then.
        if final or asyncio.get_running_loop().time() >= next_notice:
            next_notice = asyncio.get_running_loop().time() + NOTICE_EVERY_S
            for notice in await asyncio.to_thread(run_notices, engine, catalog, run_id):
                if notice["key"] not in noticed and len(noticed) < 10_000:
                    noticed.add(notice["key"])
                    yield _sse("notice", after, notice)
        rows = await asyncio.to_thread(_events_after, engine, run_id, after, not final)
        for row in rows:
            after = row["id"]
            yield _sse("sandbox-event", after, row)
        if state != sent_state:
            sent_state = state
            idle = 0.0
            yield f"id: {after}\nevent: run\ndata: {state}\n\n".encode()
        if final and len(rows) < BATCH:
            yield _sse("end", after, {"run_id": run_id, "status": run["status"]})
            return
        if not rows:
            idle += POLL_S
            if idle >= KEEPALIVE_S:
                idle = 0.0
                yield b": keep-alive\n\n"
            await asyncio.sleep(POLL_S)
        run, state = await _shared_run(engine, run_id)


# Every viewer of a run polls its state; with many viewers of a big run (a dashboard on
# 20 screens, 1,000 sandboxes) reading and encoding it per viewer would dominate. Viewers
# in this process share one read per POLL_S, and its JSON text, per run.
_SHARED: dict[tuple[int, int, str], tuple[float, dict[str, Any], str]] = {}
_LOCKS: dict[tuple[int, int, str], asyncio.Lock] = {}
_SHARED_KEEP_S = 30.0


async def _shared_run(engine: Engine, run_id: str) -> tuple[dict[str, Any], str]:
    """The run and its JSON, read at most once per POLL_S for all of its viewers."""
    key = (id(asyncio.get_running_loop()), id(engine), run_id)
    async with _LOCKS.setdefault(key, asyncio.Lock()):
        now = time.monotonic()
        cached = _SHARED.get(key)
        if cached and now - cached[0] < POLL_S:
            return cached[1], cached[2]
        run = await asyncio.to_thread(get_run, engine, run_id)
        state = json.dumps(run, sort_keys=True)
        _SHARED[key] = (now, run, state)
        for old in [k for k, v in _SHARED.items() if now - v[0] > _SHARED_KEEP_S]:
            _SHARED.pop(old, None)
            _LOCKS.pop(old, None)
        return run, state


def _events_after(engine: Engine, run_id: str, after: int, settle: bool) -> list[dict[str, Any]]:
    query = (
        select(
            events.c.id,
            events.c.sandbox_id,
            events.c.event_id,
            events.c.attempt,
            events.c.seq,
            events.c.type,
            events.c.time,
            events.c.data,
        )
        .where(events.c.run_id == run_id, events.c.id > after)
        .order_by(events.c.id)
        .limit(BATCH)
    )
    if settle:
        query = query.where(events.c.received_at < datetime.now(UTC) - timedelta(seconds=SETTLE_S))
    with engine.connect() as conn:
        return [{**row._asdict(), "time": row.time.isoformat()} for row in conn.execute(query)]


def _sse(kind: str, event_id: int, data: dict[str, Any]) -> bytes:
    """One message; its data is strict JSON (a non-finite number stored earlier is null)."""
    return f"id: {event_id}\nevent: {kind}\ndata: {strict_json(data)}\n\n".encode()


def strict_json(value: Any) -> str:
    """JSON without NaN or Infinity, which JSON does not have: they become null."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
