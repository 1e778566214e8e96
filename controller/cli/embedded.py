"""The embedded controller: the whole service in-process, behind a token of its own.

`EmbeddedServer` serves the real API with uvicorn on a free 127.0.0.1 port in a
background thread (never Starlette's test client). With `session_token=True` (what
`simplectl` always asks for) it mints a random API token for its session that only its
own client holds: no process is trusted for its address, sandboxes included (their
sandbox tokens authorize only the sandbox routes). Tests that drive the API with plain
httpx leave it off. With `start_controller=False` (plan, templates, status …) it
migrates the database but starts no reconciler.

With the docker backend and no network chosen it also listens on the `simple` Docker
network's gateway (see `controller.backends.docker.network`), where only the sandbox
routes answer, and gives sandboxes that address.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from types import TracebackType

import uvicorn
from starlette.types import ASGIApp

from controller.api.app import create_app
from controller.api.listeners import SandboxOnlyAddresses
from controller.api.sockets import WS_MAX_BYTES, WS_MAX_QUEUE
from controller.backends.base import Backend
from controller.db.engine import upgrade
from controller.errors import UnavailableError
from controller.service import Controller
from controller.settings import Settings

logger = logging.getLogger(__name__)
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 15
# On SIGTERM, open streams (a run's events, followed logs) get this long to end before
# they are cut: uvicorn would otherwise wait for every client to hang up, and a watching
# dashboard kept the controller from stopping (Kubernetes then kills it, uncleanly).
SHUTDOWN_GRACE_S = 5


def bound_socket(host: str, port: int = 0) -> socket.socket:
    """A TCP socket bound to host:port (0 = a free port), ready for uvicorn."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UnavailableError(
            f"cannot listen on {host}:{port}: {e.strerror or e}",
            hint="choose another port (--port / SIMPLE_PORT)",
        ) from None
    return sock


@dataclass
class SandboxListener:
    """Where sandboxes reach the controller: an address on the `simple` network's gateway."""

    address: str
    url: str
    sock: socket.socket | None  # None when the main listener already covers the address


def docker_listener(settings: Settings, port: int, bind: bool) -> SandboxListener | None:
    """For the docker backend with no network chosen: the `simple` network and a listener
    on its gateway (port 0 = a free one); None when the user chose the way themselves."""
    from controller.backends.docker.network import connect, ensure_network, wants_default_network

    if not wants_default_network(settings):
        return None
    gateway = ensure_network(connect())
    sock = bound_socket(gateway, port) if bind else None
    real_port = sock.getsockname()[1] if sock else port
    return SandboxListener(gateway, f"http://{gateway}:{real_port}", sock)


def listener_settings(settings: Settings, listener: SandboxListener | None) -> dict[str, object]:
    """The settings a sandbox listener implies: its URL for sandboxes, the `simple` network."""
    from controller.backends.docker.network import DEFAULT_NETWORK

    if listener is None:
        return {}
    return {"controller_url": listener.url, "docker_network": DEFAULT_NETWORK}


def serve_app(
    app: ASGIApp,
    settings: Settings,
    sock: socket.socket,
    listener: SandboxListener | None,
    log_level: str,
) -> None:
    """`simplectl serve`: uvicorn on `sock` (settings.host:port, bound by the caller before
    the controller starts, so a taken port starts nothing), and on the sandbox listener if
    any (where only the sandbox routes answer). uvicorn's own lines go through our root
    handler (log_config=None): one format (SIMPLE_LOG_FORMAT), redacted."""
    served = app
    sockets = [sock]
    if listener is not None:
        logger.info("sandboxes reach the controller at %s (sandbox routes only)", listener.url)
        served = SandboxOnlyAddresses(app, [listener.address])
        if listener.sock is not None:  # else the main listener (0.0.0.0) covers the gateway
            sockets.append(listener.sock)
    config = uvicorn.Config(
        served,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        log_config=None,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        ws_max_size=WS_MAX_BYTES,  # every listener: see controller.api.sockets
        ws_max_queue=WS_MAX_QUEUE,
    )
    uvicorn.Server(config).run(sockets=sockets)


class EmbeddedServer:
    """Serves the API on a free loopback port in a background thread, with a session token."""

    def __init__(
        self,
        settings: Settings,
        port: int = 0,
        start_controller: bool = True,
        session_token: bool = False,
        backend: Backend | None = None,
    ) -> None:
        self.token: str | None = secrets.token_urlsafe(32) if session_token else None
        self.sock = bound_socket("127.0.0.1", port)
        port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.start_controller = start_controller
        try:
            self.listener = docker_listener(settings, 0, bind=True) if start_controller else None
        except BaseException:
            self.sock.close()
            raise
        self.settings = settings.model_copy(
            update={
                "host": "127.0.0.1",
                "port": port,
                "controller_url": settings.controller_url or self.url,
                "api_tokens": [*settings.api_tokens, *([self.token] if self.token else [])],
                **listener_settings(settings, self.listener),
            }
        )
        self.controller = Controller(self.settings, backend=backend)
        if not start_controller:
            upgrade(self.controller.engine)
        self.server = uvicorn.Server(self._config())
        sockets = [self.sock]
        if self.listener and self.listener.sock:
            sockets.append(self.listener.sock)
        self.thread = threading.Thread(
            target=self.server.run,
            kwargs={"sockets": sockets},
            daemon=True,
            name="embedded-api",
        )

    def _config(self) -> uvicorn.Config:
        app = create_app(self.controller, manage_lifecycle=self.start_controller)
        return uvicorn.Config(
            SandboxOnlyAddresses(app, [self.listener.address]) if self.listener else app,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            ws_max_size=WS_MAX_BYTES,  # every listener: see controller.api.sockets
        ws_max_queue=WS_MAX_QUEUE,
        )

    def __enter__(self) -> EmbeddedServer:
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self._close()
                raise UnavailableError(
                    "the embedded controller did not start", hint="run with -v to see why"
                )
            time.sleep(0.01)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=STOP_TIMEOUT_S)
        self._close()

    def _close(self) -> None:
        self.sock.close()
        if self.listener and self.listener.sock:
            self.listener.sock.close()
        if not self.start_controller:
            self.controller.close()
