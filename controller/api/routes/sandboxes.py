"""Sandboxes: read one, its logs; and the sandbox contract's events and snapshot upload."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi import Path as FastApiPath
from fastapi.responses import PlainTextResponse, StreamingResponse

from controller import metrics
from controller.api.body_guard import ATTEMPT_KEY
from controller.api.deps import Authorized, ControllerDep
from controller.api.log_follow import FollowerSlots
from controller.api.log_follow import follow as follow_logs
from controller.api.requests import EventBatch
from controller.api.responses import (
    EventsAccepted,
    SandboxDetail,
    SandboxId,
    SnapshotStored,
    error_responses,
)
from controller.attempts.inputs import input_key
from controller.errors import (
    ForbiddenError,
    NotFoundError,
    PayloadTooLargeError,
    QuotaExceededError,
    SimpleError,
    UnauthorizedError,
)
from controller.intake.event_quota import EventQuota
from controller.intake.event_writer import EventWriter
from controller.intake.ingest import (
    PERSISTENCE_FLAG,
    EventRequest,
    IncomingEvent,
    answer_without_storing,
    load_sandbox,
)
from controller.intake.tokens import signature_matches
from controller.runs import get_sandbox
from controller.states import SandboxStatus
from controller.store.base import snapshot_key, stage_input_key

router = APIRouter(prefix="/v1/sandboxes", tags=["sandboxes"], responses=error_responses(404, 422))


@router.get(
    "/{sandbox_id}",
    dependencies=[Authorized],
    response_model=SandboxDetail,
    responses=error_responses(401),
)
def sandbox_get(sandbox_id: SandboxId, controller: ControllerDep) -> dict[str, Any]:
    """One sandbox with its attempts."""
    return get_sandbox(controller.engine, sandbox_id)


@router.get(
    "/{sandbox_id}/logs",
    dependencies=[Authorized],
    response_class=Response,  # the 200 is text; the errors stay JSON in the schema
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "description": "stdout and stderr of the latest attempt; with follow=true, "
            "streamed until the sandbox ends",
        },
        **error_responses(401, 429),
    },
)
def sandbox_logs(
    sandbox_id: SandboxId, request: Request, controller: ControllerDep, follow: bool = False
) -> Any:
    """The sandbox's output: live while it runs, archived afterwards."""
    row = load_sandbox(controller.engine, sandbox_id)
    if row.status == SandboxStatus.RUNNING:
        if follow:
            slot = _follower_slots(request, controller).take(sandbox_id)
            stream = follow_logs(controller, sandbox_id, slot)
            return StreamingResponse(stream, media_type="text/plain")
        try:
            return PlainTextResponse(controller.backend.read_logs(sandbox_id))
        except NotFoundError:
            pass
    if row.log_key:
        data = controller.store.get(row.log_key)
        if data is not None:
            return PlainTextResponse(data)
    elif row.status != SandboxStatus.RUNNING:  # ended, its logs not archived yet: still there
        try:
            return PlainTextResponse(controller.backend.read_logs(sandbox_id))
        except NotFoundError:
            pass
    raise NotFoundError(
        f"no logs for sandbox {sandbox_id} (status {row.status})",
        hint="logs exist once the sandbox has started",
    )


def _follower_slots(request: Request, controller: Any) -> FollowerSlots:
    slots: FollowerSlots | None = getattr(request.app.state, "log_followers", None)
    if slots is None:
        settings = controller.settings
        slots = request.app.state.log_followers = FollowerSlots(
            settings.log_followers_per_sandbox, settings.log_followers_total
        )
    return slots


@router.post(
    "/{sandbox_id}/events",
    response_model=EventsAccepted,
    responses=error_responses(400, 401, 403, 409, 413, 429, 503),
)
async def post_events(
    sandbox_id: SandboxId,
    batch: EventBatch,
    request: Request,
    controller: ControllerDep,
    authorization: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    """The sandbox contract: store each (sandbox, event id) once; replays get the same answer.

    The answer comes after the commit; concurrent batches share one (group commit).
    """
    incoming = EventRequest(
        sandbox_id,
        authorization,
        [IncomingEvent(e.id, e.seq, e.type, e.time, e.data) for e in batch.events],
    )
    state = request.app.state
    if not getattr(state, PERSISTENCE_FLAG, True):
        return answer_without_storing(incoming)
    writer: EventWriter | None = getattr(state, "event_writer", None)
    if writer is None or writer.engine is not controller.engine:
        settings = controller.settings
        writer = state.event_writer = EventWriter(
            controller.engine, settings.ingest_queue_max_events, settings.ingest_retry_after_s
        )
    # BodyGuard found the attempt whose token this is (none: the writer answers 401/403).
    attempt: int | None = getattr(request.state, ATTEMPT_KEY, None)
    cost = None
    try:
        if attempt is not None:
            cost = (sandbox_id, attempt, len(batch.events), len(await request.body()))
            await asyncio.to_thread(_event_quota(request, controller).reserve, *cost)
        return await asyncio.wrap_future(writer.submit(incoming))
    except SimpleError as e:
        metrics.EVENTS_REJECTED.labels(str(e.status_code)).inc()
        if cost is not None and not isinstance(e, QuotaExceededError | PayloadTooLargeError):
            _event_quota(request, controller).release(*cost)
        raise


def _event_quota(request: Request, controller: Any) -> EventQuota:
    quota: EventQuota | None = getattr(request.app.state, "event_quota", None)
    if quota is None or quota.engine is not controller.engine:
        settings = controller.settings
        quota = request.app.state.event_quota = EventQuota(
            controller.engine,
            settings.events_max_per_attempt,
            settings.events_max_bytes_per_attempt,
        )
    return quota


@router.put(
    "/{sandbox_id}/snapshot",
    status_code=201,
    response_model=SnapshotStored,
    responses=error_responses(401, 403, 413),
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "The SQLite snapshot file",
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def put_snapshot(
    sandbox_id: SandboxId,
    request: Request,
    controller: ControllerDep,
    attempt: Annotated[int, Query(ge=1)],
    signature: Annotated[str, Query(pattern="^[0-9a-f]{64}$")],
) -> dict[str, Any]:
    """Where sandboxes upload snapshots when the store has no presigned URLs (local store)."""
    try:
        row = load_sandbox(controller.engine, sandbox_id)
    except NotFoundError:  # the same answer as a wrong signature: ids are not probed here
        row = None
    if row is None or not signature_matches(signature, row.token_hash, sandbox_id, attempt):
        raise UnauthorizedError(
            f"invalid upload signature for sandbox {sandbox_id}",
            hint="PUT to SIMPLE_SNAPSHOT_URL exactly as given",
        )
    if row.attempt != attempt or row.status != SandboxStatus.RUNNING:
        raise ForbiddenError(
            f"attempt {attempt} of sandbox {sandbox_id} is over",
            hint="only the running attempt may upload",
        )
    limit = controller.settings.snapshot_max_bytes
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            raise PayloadTooLargeError(
                f"snapshot is over the {limit}-byte limit",
                hint="keep snapshots small or raise SIMPLE_SNAPSHOT_MAX_BYTES",
            )
    key = snapshot_key(row.run_id, sandbox_id, attempt)
    controller.store.put(key, bytes(body))
    return {"key": key, "bytes": len(body)}


@router.get(
    "/{sandbox_id}/inputs/{kind}",
    response_class=Response,
    responses={
        200: {
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
            "description": "The attempt's items (JSON Lines), its checkpoint (SQLite) or "
            "the previous stage's rows (SQLite)",
        },
        **error_responses(401, 403, 404),
    },
)
def get_input(
    sandbox_id: SandboxId,
    kind: Annotated[str, FastApiPath(pattern="^(items|resume|stage)$")],
    controller: ControllerDep,
    attempt: Annotated[int, Query(ge=1)],
    signature: Annotated[str, Query(pattern="^[0-9a-f]{64}$")],
) -> Response:
    """SIMPLE_ITEMS_URL, SIMPLE_RESUME_URL and SIMPLE_INPUT_URL when the store has no
    presigned URLs: signed for one attempt of one sandbox and one kind of input."""
    row = load_sandbox(controller.engine, sandbox_id)
    if not signature_matches(signature, row.token_hash, sandbox_id, attempt, f"input:{kind}"):
        raise UnauthorizedError(
            f"invalid signature for the {kind} input of sandbox {sandbox_id}",
            hint="GET the URL exactly as given in the environment",
        )
    if row.attempt != attempt or row.status != SandboxStatus.RUNNING:
        raise ForbiddenError(
            f"attempt {attempt} of sandbox {sandbox_id} is over",
            hint="only the running attempt may read its inputs",
        )
    if kind == "stage":
        data = controller.store.get(
            stage_input_key(row.run_id, row.stage),
            max_bytes=controller.settings.snapshot_max_bytes * 64,
        )
    else:
        data = controller.store.get(input_key(row, attempt, kind))
    if data is None:
        raise NotFoundError(f"sandbox {sandbox_id} attempt {attempt} has no {kind} input")
    return Response(data, media_type="application/octet-stream")
