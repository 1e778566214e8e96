"""Which Host names the controller answers to (pure ASGI middleware), against DNS rebinding.

A web page on another site can make the browser's name for it point at 127.0.0.1; its
requests then carry `Host: evil.example` and an Origin to match, so no origin check
sees another site. The controller answers only the names it is known by: the loopback
names, the host of the URL sandboxes use (`SIMPLE_CONTROLLER_URL`), the address it
listens on, and `SIMPLE_ALLOWED_HOSTS` (`*` answers any name). Any other Host gets 400
before a route runs, over HTTP and on a WebSocket's handshake alike — but the health
probes (`GET /healthz`, `/readyz`), which load balancers send to an address.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from controller.settings import Settings

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
ANY_HOST = "*"
PROBE_PATHS = ("/healthz", "/readyz")


def host_name(header: str) -> str:
    """The name of a Host header, without its port, lowercased: `[::1]:8080` → `::1`."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def allowed_hosts(settings: Settings, extra: Iterable[str] = ()) -> frozenset[str]:
    """The names this controller answers to (see the module's docstring)."""
    names = {*LOOPBACK_HOSTS, *settings.allowed_hosts, *extra}
    names.add(urlsplit(settings.resolved_controller_url).hostname or "")
    if settings.host not in ("0.0.0.0", "::", ""):
        names.add(settings.host)
    return frozenset(host_name(n) if n != ANY_HOST else n for n in names if n)


class HostGuard:
    """ASGI middleware: 400 for a request (or WebSocket) whose Host is not an allowed name."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] in ("http", "websocket") and ANY_HOST not in self.hosts
                and not _probe(scope)):
            header = next((v for k, v in scope["headers"] if k == b"host"), b"")
            name = host_name(header.decode("latin-1"))
            if name not in self.hosts:
                await _refuse(scope, send, name)
                return
        await self.app(scope, receive, send)


def _probe(scope: Scope) -> bool:
    """A health probe: load balancers and kubelets address the controller by IP, not by a
    name; /healthz and /readyz read nothing a rebinding page could use, so any Host goes."""
    return scope["type"] == "http" and scope.get("method") in ("GET", "HEAD") and scope.get(
        "path") in PROBE_PATHS


async def _refuse(scope: Scope, send: Send, name: str) -> None:
    body = json.dumps(
        {
            "error": {
                "code": "invalid_host",
                "message": f"this controller does not answer to the host name {name!r}",
                "hint": "use the controller's own address, or add the name to "
                "SIMPLE_ALLOWED_HOSTS on the controller",
                "field": None,
            }
        }
    ).encode()
    prefix = "http"
    if scope["type"] == "websocket":
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008})  # the server answers 403
            return
        prefix = "websocket.http"
    await send(
        {
            "type": f"{prefix}.response.start",
            "status": 400,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": f"{prefix}.response.body", "body": body})
