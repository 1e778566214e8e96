"""The embedded controller: the whole service in-process, on 127.0.0.1 only."""

from __future__ import annotations

import logging
import socket
import threading
import time
from types import TracebackType

import uvicorn

from controller.api.app import create_app
from controller.backends.base import Backend
from controller.errors import UnavailableError
from controller.service import Controller
from controller.settings import Settings

logger = logging.getLogger(__name__)
START_TIMEOUT_S = 30


class EmbeddedServer:
    """Serves the API on a free loopback port in a background thread."""

    def __init__(self, settings: Settings, port: int = 0, backend: Backend | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.settings = settings.model_copy(
            update={"host": "127.0.0.1", "port": port, "controller_url": self.url}
        )
        self.controller = Controller(self.settings, backend=backend)
        config = uvicorn.Config(
            create_app(self.controller), log_level="warning", access_log=False, lifespan="on"
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
        self.thread.join(timeout=15)
        self.sock.close()
