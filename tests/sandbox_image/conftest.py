"""A tiny controller stand-in on 127.0.0.1: records event POSTs and snapshot PUTs.

It can fail the first N requests with 503, or answer events with a chosen
status, so the runtime's retries and refusals are tested over real HTTP.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Recorder:
    """What the fake controller received, and how it should answer."""

    url: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)  # accepted, deduplicated
    post_sizes: list[int] = field(default_factory=list)  # events per POST, every POST
    post_auth: list[str | None] = field(default_factory=list)
    puts: list[bytes] = field(default_factory=list)
    put_auth: list[str | None] = field(default_factory=list)
    put_paths: list[str] = field(default_factory=list)
    fail_posts: int = 0  # answer the next N POSTs with 503
    busy_posts: int = 0  # answer the next N POSTs with 429 and Retry-After: retry_after
    retry_after: str = "1"
    fail_retry_after: str | None = None  # Retry-After of the 503s, if any
    post_times: list[float] = field(default_factory=list)  # monotonic, every POST
    fail_puts: int = 0  # answer the next N PUTs with 503
    event_status: Callable[[list[dict[str, Any]]], int] | None = None  # status for a batch
    put_status: int = 200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def types(self) -> list[str]:
        """The accepted events' types, in seq order."""
        return [e["type"] for e in sorted(self.events, key=lambda e: e["seq"])]

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        """The accepted events of one type."""
        return [e for e in self.events if e["type"] == event_type]

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
        """Poll `predicate` until it holds or `timeout_s` passes."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if predicate():
                return True
            time.sleep(0.02)
        return predicate()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output clean

    def _reply(self, status: int, body: bytes = b"{}", retry_after: str | None = None) -> None:
        self.send_response(status)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def do_POST(self) -> None:
        rec = self.server.recorder
        events = json.loads(self._body())["events"]
        with rec.lock:
            rec.post_sizes.append(len(events))
            rec.post_auth.append(self.headers.get("Authorization"))
            rec.post_times.append(time.monotonic())
            if rec.busy_posts > 0:
                rec.busy_posts -= 1
                return self._reply(429, b'{"detail": "busy"}', retry_after=rec.retry_after)
            if rec.fail_posts > 0:
                rec.fail_posts -= 1
                return self._reply(503, b'{"detail": "try later"}', rec.fail_retry_after)
            status = rec.event_status(events) if rec.event_status else 200
            if 200 <= status < 300:
                seen = {e["id"] for e in rec.events}
                rec.events.extend(e for e in events if e["id"] not in seen)
        self._reply(status, json.dumps({"detail": f"status {status}"}).encode())

    def do_PUT(self) -> None:
        rec = self.server.recorder
        body = self._body()
        with rec.lock:
            rec.put_auth.append(self.headers.get("Authorization"))
            if rec.fail_puts > 0:
                rec.fail_puts -= 1
                return self._reply(503)
            if rec.put_status == 200:
                rec.puts.append(body)
                rec.put_paths.append(self.path)
        self._reply(rec.put_status)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    recorder: Recorder


@pytest.fixture
def fake_controller() -> Iterator[Recorder]:
    """A running fake controller; `fake_controller.url` is its base URL."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.recorder = Recorder(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.recorder
    finally:
        server.shutdown()
        server.server_close()
