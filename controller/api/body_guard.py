"""Bodies are bounded and authenticated before they are read (pure ASGI middleware).

Every request with a body is judged on its headers first:
- a `Content-Length` over its route's limit gets 413 at once; a chunked body is
  counted while it streams and stopped with 413 as soon as it passes the limit,
  before any parsing and without buffering more than one chunk;
- a request without valid credentials gets 401 without its body parsed or held:
  an API token (or the dashboard's session cookie) on API routes, a sandbox's own
  token on the events route. The snapshot upload checks its signature before it
  reads (in its route); the login form is small and carries the token itself.
  A refused body of at most DRAIN_MAX_BYTES is read and dropped before the answer
  (see there); a larger one is left unread and the connection closed.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from http.cookies import SimpleCookie
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from controller.api.auth import SESSION_COOKIE, Refusal, api_refusal
from controller.api.sessions import Sessions
from controller.db.schema import sandboxes
from controller.intake.ingest import DATABASE_RETRY_AFTER_S
from controller.intake.tokens import TokenHolder, token_holder
from controller.settings import Settings

EVENTS_PATH = re.compile(r"^/v1/sandboxes/([a-z0-9-]{1,63})/events/?$")
SNAPSHOT_PATH = re.compile(r"^/v1/sandboxes/[^/]+/snapshot/?$")
LOGIN_PATH = "/login"
LOGIN_MAX_BYTES = 16 * 1024
DRAIN_MAX_BYTES = 1024 * 1024
"""A refused body up to this size (by its Content-Length, already within its route's
limit) is read and dropped before the answer, and the connection stays open: a bounded
read, nothing parsed or held. Closing with body bytes unread makes the kernel
reset the connection, and a reset makes the client's kernel drop the answer it has not
read yet: a client with a wrong token got "connection reset" instead of the 401."""
SANDBOX_TOKEN_HINT = "send `Authorization: Bearer $SIMPLE_SANDBOX_TOKEN`"
ATTEMPT_KEY = "sandbox_attempt"
"""`request.state` key: the attempt whose token the events request carries (quotas)."""


class BodyTooLarge(HTTPException):
    """A body passed its route's limit while it streamed (answered 413)."""

    def __init__(self, limit: int, what: str, setting: str) -> None:
        super().__init__(413, f"the {what} is over its {limit}-byte limit")
        self.limit, self.hint = limit, f"send less, or raise {setting} on the controller"


def route_limit(settings: Settings, method: str, path: str) -> tuple[int, str, str]:
    """The body limit of a route: (bytes, what, the setting that raises it)."""
    if method == "PUT" and SNAPSHOT_PATH.match(path):
        return settings.snapshot_max_bytes, "snapshot", "SIMPLE_SNAPSHOT_MAX_BYTES"
    if method == "POST" and EVENTS_PATH.match(path):
        return settings.events_max_body_bytes, "event batch", "SIMPLE_EVENTS_MAX_BODY_BYTES"
    if path == LOGIN_PATH:
        return LOGIN_MAX_BYTES, "login form", "nothing (send only the token)"
    return settings.max_body_bytes, "request body", "SIMPLE_MAX_BODY_BYTES"


class BodyGuard:
    """ASGI middleware: size limits and authentication before any body is read."""

    def __init__(
        self,
        app: ASGIApp,
        settings: Settings,
        engine: Callable[[], Engine],
        routes: Callable[[], list[BaseRoute]],
        sessions: Sessions,
    ) -> None:
        self.app, self.settings, self.engine, self.routes = app, settings, engine, routes
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        length = headers.get("content-length")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        no_body = not chunked and (length is None or length.strip() in ("", "0"))
        if no_body or not self._routed(scope):  # 404 and 405 are answered unread
            await self.app(scope, receive, send)
            return
        limit, what, setting = route_limit(self.settings, scope["method"], scope["path"])
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _answer(send, 413, "payload_too_large", f"the {what} is {length} bytes, "
                          f"over its {limit}-byte limit", f"send less, or raise {setting}")
            return
        try:
            refusal = await self._refusal(scope, headers)
        except SQLAlchemyError:  # the token lookup needs the database: a sandbox retries later
            await _answer(send, 503, "unavailable", "the controller's database is unavailable",
                          "retry after Retry-After seconds; nothing was stored")
            return
        if refusal is not None:
            drained = await _drain(receive, length)
            await _answer(send, 401, "unauthorized", refusal.message, refusal.hint,
                          close=not drained)
            return
        await self.app(scope, _counted(receive, BodyTooLarge(limit, what, setting)), send)

    def _routed(self, scope: Scope) -> bool:
        """Whether a route takes this method and path (else nothing reads the body)."""
        return any(route.matches(scope)[0] == Match.FULL for route in self.routes())

    async def _refusal(self, scope: Scope, headers: dict[str, str]) -> Refusal | None:
        """Why the request's credentials are refused (missing or wrong), or None."""
        path = scope["path"]
        if SNAPSHOT_PATH.match(path) or path == LOGIN_PATH:
            return None  # the route checks the signature first; the form holds the token
        token = _bearer(headers.get("authorization", ""))
        found = EVENTS_PATH.match(path)
        if not found:
            tokens = self.settings.api_tokens
            cookie = _cookie(headers, SESSION_COOKIE)
            live = bool(tokens and cookie and not token) and await asyncio.to_thread(
                self.sessions.live, cookie
            )
            return api_refusal(token, live, tokens)
        if not token:
            return Refusal("missing sandbox token", SANDBOX_TOKEN_HINT)
        attempt = await asyncio.to_thread(self._sandbox_attempt, found.group(1), token)
        if attempt is TokenHolder.NOBODY:
            return Refusal("unknown sandbox token", "use SIMPLE_SANDBOX_TOKEN exactly as given")
        if isinstance(attempt, int):
            scope.setdefault("state", {})[ATTEMPT_KEY] = attempt
        return None  # another sandbox's token: the route answers 403, naming why

    def _sandbox_attempt(self, sandbox_id: str, token: str) -> int | TokenHolder:
        """The attempt if `token` is this sandbox's, else whose it is."""
        with self.engine().connect() as conn:
            row = conn.execute(
                select(sandboxes.c.attempt, sandboxes.c.token_hash).where(
                    sandboxes.c.id == sandbox_id
                )
            ).first()
            holder = token_holder(conn, token, row.token_hash if row is not None else None)
        if holder is TokenHolder.THIS_SANDBOX and row is not None:
            return int(row.attempt)
        return holder


def _counted(receive: Receive, too_large: BodyTooLarge) -> Receive:
    """`receive` that raises `too_large` once the body passes its limit."""
    received = 0

    async def counted() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > too_large.limit:
                raise too_large
        return message

    return counted


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _bearer(authorization: str) -> str:
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _cookie(headers: dict[str, str], name: str) -> str | None:
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(headers.get("cookie", ""))
    except Exception:  # a malformed Cookie header is no session
        return None
    morsel = cookies.get(name)
    return morsel.value if morsel else None


async def _drain(receive: Receive, length: str | None) -> bool:
    """Read and drop a body of a declared length up to DRAIN_MAX_BYTES; whether it was."""
    if length is None or int(length) > DRAIN_MAX_BYTES:
        return False
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return False  # the client went away
        if not message.get("more_body"):
            return True


async def _answer(
    send: Send, status: int, code: str, message: str, hint: str, close: bool = True
) -> None:
    body = json.dumps(
        {"error": {"code": code, "message": message, "hint": hint, "field": None}}
    ).encode()
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:  # an unread body cannot be skipped on this connection
        headers.append((b"connection", b"close"))
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if status == 503:
        headers.append((b"retry-after", str(DATABASE_RETRY_AFTER_S).encode()))
    start: dict[str, Any] = {"type": "http.response.start", "status": status, "headers": headers}
    await send(start)
    await send({"type": "http.response.body", "body": body})
