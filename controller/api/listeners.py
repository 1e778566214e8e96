"""Sandbox-only addresses: where sandboxes reach the controller, only their routes answer.

The controller may listen on an address that containers can reach (the `simple` Docker
network's gateway). Requests that arrive on such an address get the sandbox contract's
routes (events, snapshot upload) and /healthz; every other route answers 401, with or
without any token, so the API is never served to containers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

SANDBOX_ROUTES = (
    ("POST", re.compile(r"^/v1/sandboxes/[^/]+/events/?$")),
    ("PUT", re.compile(r"^/v1/sandboxes/[^/]+/snapshot/?$")),
    # SIMPLE_ITEMS_URL, SIMPLE_RESUME_URL and SIMPLE_INPUT_URL (batch templates, resumed
    # attempts, staged runs)
    ("GET", re.compile(r"^/v1/sandboxes/[^/]+/inputs/(items|resume|stage)/?$")),
    ("GET", re.compile(r"^/healthz$")),
)
REFUSAL = json.dumps(
    {
        "error": {
            "code": "unauthorized",
            "message": "this address serves only the sandbox routes",
            "hint": "use the controller's API address (127.0.0.1 or --server) with a token",
            "field": None,
        }
    }
).encode()


def is_sandbox_route(method: str, path: str) -> bool:
    return any(method == m and pattern.match(path) for m, pattern in SANDBOX_ROUTES)


class SandboxOnlyAddresses:
    """ASGI middleware: on `addresses` (local IPs), only sandbox routes get through."""

    def __init__(self, app: ASGIApp, addresses: Iterable[str]) -> None:
        self.app = app
        self.addresses = frozenset(addresses)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self._sandbox_side(scope):
            allowed = scope["type"] == "http" and is_sandbox_route(
                scope["method"], scope["path"]
            )
            if not allowed:
                await self._refuse(scope, send)
                return
        await self.app(scope, receive, send)

    def _sandbox_side(self, scope: Scope) -> bool:
        server = scope.get("server")
        return server is None or server[0] in self.addresses

    @staticmethod
    async def _refuse(scope: Scope, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(REFUSAL)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": REFUSAL})
