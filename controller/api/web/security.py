"""The dashboard's CSRF tokens, Content-Security-Policy and origin guard.

With SIMPLE_API_TOKENS set, a browser logs in once with a token; the session cookie it
gets (`controller.api.sessions`: a random value, never the token) is HttpOnly,
SameSite=Strict, and Secure unless the controller is served on loopback.
State-changing requests made with the cookie must carry `X-CSRF-Token` (the page's
token, derived from the session); any state-changing request whose Origin is another
site is refused, cookie or not, and so is a WebSocket handshake from another site, so
a web page cannot drive a loopback controller without tokens either (and
`controller.api.hosts` refuses the names a rebound page would send).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from controller.api.auth import SESSION_COOKIE
from controller.api.sessions import Sessions

CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


def csrf_token(session: str | None) -> str:
    """The CSRF token of a session ('' without one: no cookie, nothing to forge)."""
    if not session:
        return ""
    return hmac.new(session.encode(), b"simple-csrf", hashlib.sha256).hexdigest()


def safe_next(target: str | None) -> str:
    """Where to go after login: a path on this server only (no `//host`, no scheme)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def cross_origin_reason(conn: HTTPConnection) -> str | None:
    """Why this state-changing request comes from another site, or None if it does not."""
    site = conn.headers.get("sec-fetch-site")
    if site and site not in ("same-origin", "none"):
        return f"Sec-Fetch-Site is {site}"
    origin = conn.headers.get("origin")
    if origin is None:
        return None
    host = conn.headers.get("host", "")
    parts = urlsplit(origin)
    if origin == "null" or parts.netloc != host or parts.scheme not in ("http", "https"):
        return f"Origin {origin} is not this server ({host})"
    return None


async def csrf_failure(
    conn: HTTPConnection, method: str, tokens: list[str], sessions: Sessions
) -> str | None:
    """Why a request must be refused as cross-site, or None. Safe methods always pass."""
    if method in SAFE_METHODS:
        return None
    reason = cross_origin_reason(conn)
    if reason:
        return reason
    session = conn.cookies.get(SESSION_COOKIE)
    uses_cookie = (
        bool(tokens and session)
        and "authorization" not in conn.headers
        and await asyncio.to_thread(sessions.live, session)
    )
    if uses_cookie:
        sent = conn.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), csrf_token(session).encode()):
            return "the X-CSRF-Token header is missing or wrong"
    return None


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class CsrfGuard:
    """ASGI middleware: refuse cross-site state changes before any route reads a body."""

    def __init__(self, app: ASGIApp, tokens: Callable[[], list[str]], sessions: Sessions) -> None:
        self.app = app
        self.tokens, self.sessions = tokens, sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            conn = HTTPConnection(scope)
            reason = await csrf_failure(conn, scope["method"], self.tokens(), self.sessions)
            if reason:
                await _refuse(send, reason)
                return
        if scope["type"] == "websocket" and cross_origin_reason(HTTPConnection(scope)):
            # A browser sends the page's Origin on every handshake, and no preflight
            # guards one: a page on another site may not open a socket (the server
            # answers the handshake 403), cookie or not.
            await send({"type": "websocket.close", "code": 1008})
            return
        await self.app(scope, receive, send)


async def _refuse(send: Send, reason: str) -> None:
    body = json.dumps(
        {
            "error": {
                "code": "cross_site_request",
                "message": f"refused a cross-site request: {reason}",
                "hint": "change state from the dashboard's own pages, or use the API with "
                "an Authorization header",
                "field": None,
            }
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
