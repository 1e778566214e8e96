"""Logging: text or one JSON object per line, with the ids a line is about, never a token.

`log_context(run_id=..., sandbox_id=..., attempt=...)` binds ids for every line logged
inside it (a contextvar, so it follows threads' and tasks' own flow); the HTTP
middleware binds a request id (and the run or sandbox the path names). Both formats
redact bearer tokens and `token=` / `signature=` values (see docs/observability.md).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

CONTEXT_FIELDS = ("run_id", "sandbox_id", "attempt", "request_id")
_context: ContextVar[dict[str, Any] | None] = ContextVar("simple_log_context", default=None)

REDACTED = "[redacted]"
_SECRETS = re.compile(
    r"(?P<key>\bBearer\s+"
    r"|\b(?:[\w-]*token|[\w-]*signature|x-amz-credential|x-amz-security-token)"
    r"(?:\"?\s*[:=]\s*\"?))"
    r"(?P<value>[^\s\"'&,;)]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """`text` with bearer tokens and token/signature values replaced by [redacted]."""
    return _SECRETS.sub(lambda m: m.group("key") + REDACTED, text)


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Bind ids (run_id, sandbox_id, attempt, request_id) to every line logged inside."""
    current = _context.get() or {}
    token = _context.set({**current, **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def bound() -> dict[str, Any]:
    """The ids bound here."""
    return dict(_context.get() or {})


class RedactingFormatter(logging.Formatter):
    """The text format, redacted."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the bound ids, exc_info."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        entry.update(bound())
        for name in CONTEXT_FIELDS:  # logger.info(..., extra={"sandbox_id": ...}) wins
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exc_info"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, default=str, ensure_ascii=False)


def setup_logging(level: int, log_format: str = "text") -> None:
    """Root logging to stderr in `log_format` (`text` or `json`); replaces earlier handlers."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_PATH_IDS = re.compile(r"^/v1/(?P<kind>runs|sandboxes)/(?P<id>[a-z0-9-]{1,63})(?:/|$)")


class RequestContextMiddleware:
    """ASGI middleware: a request id (the client's X-Request-ID if sane, else new) bound
    to every line logged while serving, echoed in the response; the run or sandbox the
    path names bound too."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        fields: dict[str, Any] = {"request_id": request_id}
        match = _PATH_IDS.match(scope.get("path", ""))
        if match:
            fields["run_id" if match["kind"] == "runs" else "sandbox_id"] = match["id"]

        async def send_with_id(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        with log_context(**fields):
            await self.app(scope, receive, send_with_id)
