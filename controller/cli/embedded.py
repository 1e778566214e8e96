"""The embedded controller: the whole service in-process, behind a token of its own.

`EmbeddedServer` serves the real API with uvicorn on a free 127.0.0.1 port in a
background thread (never Starlette's test client). With `session_token=True` (what
`simplectl` always asks for) it mints a random API token for its session that only its
own client holds: no process is trusted for its address, sandboxes included (their
sandbox tokens authorize only the sandbox routes). Tests that drive the API with plain
httpx leave it off. With `start_controller=False` (plan, templates, status …) it
migrates the database but starts no reconciler.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from types import TracebackType

import uvicorn

from controller.api.app import create_app
from controller.db.engine import upgrade
from controller.errors import UnavailableError
from controller.service import Controller
from controller.settings import Settings

logger = logging.getLogger(__name__)
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 15


def bound_socket(host: str, port: int = 0) -> socket.socket:
    """A TCP socket bound to host:port (0 = a free port), ready for uvicorn."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


class EmbeddedServer:
    """Serves the API on a free loopback port in a background thread, with a session token."""

    def __init__(
        self,
        settings: Settings,
        port: int = 0,
        start_controller: bool = True,
        session_token: bool = False,
    ) -> None:
        self.token: str | None = secrets.token_urlsafe(32) if session_token else None
        self.sock = bound_socket("127.0.0.1", port)
        port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.start_controller = start_controller
        self.settings = settings.model_copy(
            update={
                "host": "127.0.0.1",
                "port": port,
                "controller_url": settings.controller_url or self.url,
                "api_tokens": [*settings.api_tokens, *([self.token] if self.token else [])],
            }
        )
        self.controller = Controller(self.settings)
        if not start_controller:
            upgrade(self.controller.engine)
        config = uvicorn.Config(
            create_app(self.controller, manage_lifecycle=start_controller),
            log_level="warning",
            access_log=False,
            lifespan="on",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run,
            kwargs={"sockets": [self.sock]},
            daemon=True,
            name="embedded-api",
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
        if not self.start_controller:
            self.controller.close()
