"""Sandboxes: read one, its logs; and the sandbox contract's events and snapshot upload."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi import Path as FastApiPath
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from controller.api.deps import (
    Authorized,
    ControllerDep,
    EventIntakeDep,
    FollowerSlotsDep,
    SignerDep,
    TokenAttempt,
    TransferSlotsDep,
)
from controller.api.log_follow import follow as follow_logs
from controller.api.requests import EventBatch
from controller.api.responses import (
    EventsAccepted,
    SandboxDetail,
    SandboxId,
    SnapshotStored,
    error_responses,
)
from controller.api.transfers import receive, send
from controller.attempts.urls import SNAPSHOT_PURPOSE, input_key, input_purpose
from controller.errors import ForbiddenError, NotFoundError, UnauthorizedError
from controller.intake.event_batch import EventRequest, IncomingEvent
from controller.intake.ingest import load_sandbox
from controller.intake.tokens import Signer
from controller.runs import get_sandbox
from controller.service import Controller
from controller.states import SandboxStatus
from controller.store.base import snapshot_key

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
    sandbox_id: SandboxId,
    controller: ControllerDep,
    followers: FollowerSlotsDep,
    follow: bool = False,
) -> Any:
    """The sandbox's output: live while it runs, archived afterwards."""
    row = load_sandbox(controller.engine, sandbox_id)
    if row.status == SandboxStatus.RUNNING:
        if follow:
            slot = followers.take(sandbox_id)
            stream = follow_logs(controller, sandbox_id, slot)
            return StreamingResponse(stream, media_type="text/plain")
        try:
            return _text(controller.backend.open_logs(sandbox_id).chunks)
        except NotFoundError:
            pass
    if not row.log_key and row.status != SandboxStatus.RUNNING:
        try:  # ended, its logs not archived yet: still there (or archived meanwhile)
            return _text(controller.backend.open_logs(sandbox_id).chunks)
        except NotFoundError:
            row = load_sandbox(controller.engine, sandbox_id)
    if row.log_key:
        chunks = controller.store.open(row.log_key)
        if chunks is not None:
            return _text(chunks)
    raise NotFoundError(
        f"no logs for sandbox {sandbox_id} (status {row.status})",
        # archived once, gone now: retention removed them (docs/operations.md)
        hint="its run ended more than SIMPLE_RETENTION_DAYS ago and its logs were removed"
        if row.log_key
        else "logs exist once the sandbox has started",
    )


def _text(chunks: Iterator[bytes]) -> StreamingResponse:
    """Output as it is kept, streamed a chunk at a time (at most the log budget)."""
    return StreamingResponse(chunks, media_type="text/plain; charset=utf-8")


@router.post(
    "/{sandbox_id}/events",
    response_model=EventsAccepted,
    responses=error_responses(400, 401, 403, 409, 413, 429, 503),
)
async def post_events(
    sandbox_id: SandboxId,
    batch: EventBatch,
    request: Request,
    intake: EventIntakeDep,
    attempt: TokenAttempt,
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
    return await intake.accept(incoming, attempt, len(await request.body()))


@router.put(
    "/{sandbox_id}/snapshot",
    status_code=201,
    response_model=SnapshotStored,
    responses=error_responses(401, 403, 413, 429),
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
    signer: SignerDep,
    transfers: TransferSlotsDep,
    attempt: Annotated[int, Query(ge=1)],
    signature: Annotated[str, Query(pattern="^[0-9a-f]{64}$")],
) -> dict[str, Any]:
    """Where sandboxes upload snapshots when the store has no presigned URLs (local store):
    streamed to a temporary file, one upload at a time per attempt (429 otherwise)."""
    row = await run_in_threadpool(
        _signed_attempt, controller, signer, sandbox_id, attempt, signature, SNAPSHOT_PURPOSE,
        (f"invalid upload signature for sandbox {sandbox_id}",
         "PUT to SIMPLE_SNAPSHOT_URL exactly as given"),
    )
    key = snapshot_key(row.run_id, sandbox_id, attempt)
    with transfers.take(sandbox_id, attempt, "upload"):
        size = await receive(
            request, controller.store, key, controller.settings.snapshot_max_bytes, "snapshot",
            hint="keep snapshots small or raise SIMPLE_SNAPSHOT_MAX_BYTES",
        )
    return {"key": key, "bytes": size}


@router.get(
    "/{sandbox_id}/inputs/{kind}",
    response_class=Response,
    responses={
        200: {
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
            "description": "The attempt's items (JSON Lines), its checkpoint (SQLite) or "
            "the previous stage's rows (SQLite)",
        },
        **error_responses(401, 403, 404, 429),
    },
)
def get_input(
    sandbox_id: SandboxId,
    kind: Annotated[str, FastApiPath(pattern="^(items|resume|stage)$")],
    controller: ControllerDep,
    signer: SignerDep,
    transfers: TransferSlotsDep,
    attempt: Annotated[int, Query(ge=1)],
    signature: Annotated[str, Query(pattern="^[0-9a-f]{64}$")],
) -> Response:
    """SIMPLE_ITEMS_URL, SIMPLE_RESUME_URL and SIMPLE_INPUT_URL when the store has no
    presigned URLs: signed for one attempt of one sandbox and one kind of input; streamed
    from the store, one download at a time per attempt (429 otherwise)."""
    row = _signed_attempt(
        controller, signer, sandbox_id, attempt, signature, input_purpose(kind),
        refused=(f"invalid signature for the {kind} input of sandbox {sandbox_id}",
                 "GET the URL exactly as given in the environment"),
    )
    key = input_key(kind, row.run_id, sandbox_id, attempt, row.stage)
    # The stage input holds a whole stage's rows: allowed as much as 64 snapshots.
    limit = controller.settings.snapshot_max_bytes * 64 if kind == "stage" else None
    transfer = transfers.take(sandbox_id, attempt, "download")
    try:
        chunks = controller.store.open(key, max_bytes=limit)
        if chunks is None:
            raise NotFoundError(f"sandbox {sandbox_id} attempt {attempt} has no {kind} input")
    except BaseException:
        transfer.release()
        raise
    return StreamingResponse(send(chunks, transfer), media_type="application/octet-stream")


def _signed_attempt(
    controller: Controller,
    signer: Signer,
    sandbox_id: str,
    attempt: int,
    signature: str,
    purpose: str,
    refused: tuple[str, str],
) -> Any:  # blocking (a database read): async routes call it in a worker thread
    """The sandbox's row, if `signature` is the controller's for this attempt and purpose
    and that attempt still runs. An unknown sandbox gets the same 401 as a wrong signature,
    so sandbox ids cannot be probed without one; a signed attempt that is over gets 403."""
    try:
        row = load_sandbox(controller.engine, sandbox_id)
    except NotFoundError:
        row = None
    token_hash = row.token_hash if row is not None else None
    if row is None or not signer.verify(signature, token_hash, sandbox_id, attempt, purpose):
        message, hint = refused
        raise UnauthorizedError(message, hint=hint)
    if row.attempt != attempt or row.status != SandboxStatus.RUNNING:
        raise ForbiddenError(
            f"attempt {attempt} of sandbox {sandbox_id} is over",
            hint="only the running attempt may use its signed URLs",
        )
    return row
