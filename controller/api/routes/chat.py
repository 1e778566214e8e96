"""The principal over HTTP (`POST /v1/chat`) and a WebSocket (`/v1/chat/ws`).

Both take the same API tokens as every /v1 route. A conversation belongs to the
token that opened it. The WebSocket takes the token from the `Authorization`
header or the dashboard's session cookie, both checked before the handshake is
accepted (a wrong one: 403); or (for browsers, which cannot set headers) from a
first message `{"token": "…"}`, which only a few sockets at a time may wait to
send (`controller.api.sockets`). It answers each `{"message": …}` with a `reply`,
and pushes a `notice` whenever a run the conversation follows needs attention.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocketState

from controller.api.auth import SESSION_COOKIE
from controller.api.deps import (
    Authorized,
    BearerCredentials,
    ControllerDep,
    PrincipalDep,
    SessionCookie,
    token_is_valid,
)
from controller.api.responses import ChoicePublic, Interpretation, error_responses
from controller.api.sockets import SocketSlots
from controller.errors import SimpleError
from controller.principal.conversation import Principal
from controller.service import Controller

router = APIRouter(prefix="/v1/chat", tags=["chat"])

MAX_MESSAGE_BYTES = 8192
NOTICE_EVERY_S = 2.0
TOKEN_WAIT_S = 10.0


class ChatTurn(BaseModel):
    """One message to the principal."""

    model_config = ConfigDict(extra="forbid")
    message: str = Field(min_length=1, max_length=2000, description="What you say, in words")
    conversation_id: str | None = Field(
        None, pattern=r"^conv-[0-9a-f]{24}$", description="Leave out to start a conversation"
    )
    confirm: bool = Field(
        False, description="Confirm what is pending (or what this message asks) at once"
    )


class ChatReply(BaseModel):
    """The principal's answer: words plus the structured plan, run, choices, notices."""

    model_config = ConfigDict(extra="allow")
    conversation_id: str
    kind: str = Field(
        description="plan, confirm, started, choices, answer, cancel_requested, declined, error"
    )
    text: str
    needs_confirmation: bool = Field(description="Something waits for a yes (or confirm: true)")
    plan: dict[str, Any] | None = None
    run: dict[str, Any] | None = None
    choices: list[ChoicePublic] = Field(default_factory=list)
    answer: dict[str, Any] | None = None
    interpretation: Interpretation | None = None
    notices: list[dict[str, Any]] = Field(default_factory=list)
    source: str = Field("principal", description="principal, or llm when a model phrased it")


def _owner(token: str | None) -> str:
    return hashlib.sha256((token or "").encode()).hexdigest()


@router.post(
    "",
    response_model=ChatReply,
    dependencies=[Authorized],
    responses=error_responses(401, 404, 422),
)
def chat(
    body: ChatTurn,
    principal: PrincipalDep,
    credentials: BearerCredentials = None,
    session: SessionCookie = None,
) -> dict[str, Any]:
    """One turn of a conversation with the principal (plan, run, ask, cancel)."""
    token = credentials.credentials.strip() if credentials else None
    # The dashboard's panel sends its session cookie (a digest of its token) instead.
    owner = _owner(token) if token else _owner("session:" + session if session else None)
    return principal.turn(body.conversation_id, body.message, owner, body.confirm)


@router.websocket("/ws")
async def chat_ws(
    websocket: WebSocket, controller: ControllerDep, principal: PrincipalDep
) -> None:
    """The same turns over a WebSocket, with notices pushed as they arise."""
    tokens = controller.settings.api_tokens
    token = _header_token(websocket)
    session = websocket.cookies.get(SESSION_COOKIE)
    if token is not None and not token_is_valid(token, controller):
        await websocket.close(code=4401)  # before accept: the handshake is answered 403
        return
    if token is not None or not tokens:
        owner = _owner(token)
    elif session and await asyncio.to_thread(websocket.app.state.sessions.live, session):
        owner = _owner("session:" + session)
    else:
        found = await _token_before_talk(websocket, controller)
        if found is None:
            return
        owner = _owner(found)
    if websocket.client_state is WebSocketState.CONNECTING:
        await websocket.accept()
    inbox: asyncio.Queue[str | None] = asyncio.Queue(maxsize=8)
    reader = asyncio.create_task(_read(websocket, inbox))
    try:
        await _converse(websocket, inbox, principal, owner)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader


async def _token_before_talk(websocket: WebSocket, controller: Controller) -> str | None:
    """A browser's token from its first message, on one of the few slots for sockets
    without credentials (none free: refused before accept). None: refused and closed."""
    slots: SocketSlots = websocket.app.state.unauthenticated_sockets
    if not slots.take():
        await websocket.close(code=1013)  # before accept: 403
        return None
    try:
        await websocket.accept()
        token = await _token_message(websocket)
    finally:
        slots.give_back()
    if token_is_valid(token, controller):
        return token
    await _send(websocket, {"type": "error", "error": {
        "code": "unauthorized", "message": "this API needs a valid token",
        "hint": "send `Authorization: Bearer <token>` or a first message "
        '{"token": "<token>"}'}})
    with contextlib.suppress(RuntimeError):
        await websocket.close(code=4401)
    return None


async def _converse(
    websocket: WebSocket, inbox: asyncio.Queue[str | None], principal: Principal, owner: str
) -> None:
    conversation_id: str | None = None
    while True:
        try:
            raw = await asyncio.wait_for(inbox.get(), NOTICE_EVERY_S)
        except TimeoutError:
            if conversation_id is not None:
                await _push_notices(websocket, principal, conversation_id, owner)
            continue
        if raw is None:
            return
        try:
            turn = ChatTurn.model_validate({"conversation_id": conversation_id,
                                            **_object(raw)})
            reply = await asyncio.to_thread(
                principal.turn, turn.conversation_id, turn.message, owner, turn.confirm
            )
        except (ValueError, ValidationError, SimpleError) as e:
            await _send(websocket, {"type": "error", "error": _error(e)})
            continue
        conversation_id = reply["conversation_id"]
        await _send(websocket, {"type": "reply", **reply})


async def _push_notices(
    websocket: WebSocket, principal: Principal, conversation_id: str, owner: str
) -> None:
    conversation = principal.conversations.open(conversation_id, owner)
    for notice in await asyncio.to_thread(principal.notices_for, conversation):
        await _send(websocket, {"type": "notice", **notice})


async def _read(websocket: WebSocket, inbox: asyncio.Queue[str | None]) -> None:
    """Feed messages to the inbox; too big a message closes the socket (1009)."""
    try:
        while True:
            raw = await websocket.receive_text()
            if len(raw.encode()) > MAX_MESSAGE_BYTES:
                await websocket.close(code=1009, reason=f"messages are at most "
                                      f"{MAX_MESSAGE_BYTES} bytes")
                break
            await inbox.put(raw)
    except (WebSocketDisconnect, RuntimeError, KeyError):
        pass
    await inbox.put(None)


async def _token_message(websocket: WebSocket) -> str | None:
    try:
        raw = await asyncio.wait_for(websocket.receive_text(), TOKEN_WAIT_S)
        token = _object(raw).get("token") if len(raw) <= MAX_MESSAGE_BYTES else None
    except (TimeoutError, ValueError, WebSocketDisconnect, RuntimeError, KeyError):
        return None
    return token if isinstance(token, str) else None


def _header_token(websocket: WebSocket) -> str | None:
    header = websocket.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def _object(raw: str) -> dict[str, Any]:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError('send a JSON object, e.g. {"message": "run quick"}')
    return value


def _error(error: Exception) -> dict[str, Any]:
    if isinstance(error, SimpleError):
        return {"code": error.code, "message": error.message, "hint": error.hint}
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return {"code": "invalid_input", "message": f"{where}: {first['msg']}",
                "hint": '{"message": "…", "confirm": false}'}
    return {"code": "invalid_input", "message": str(error), "hint": "send a JSON object"}


async def _send(websocket: WebSocket, data: dict[str, Any]) -> None:
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):
        await websocket.send_text(json.dumps(data, default=str))

