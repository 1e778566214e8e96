"""A sandbox's credentials are judged by one rule each, wherever they are checked.

- Its token: the body guard (before a body is read) and ingestion (inside the write)
  both ask `controller.intake.tokens.token_holder`, which compares in constant time; a
  wrong token is refused on both paths, another sandbox's is 403 on both.
- Its signed URLs: the snapshot upload and the input downloads answer an unknown
  sandbox exactly as a wrong signature (401), so sandbox ids cannot be probed without
  a signature.

A controller served on loopback (no reconciler), over rows written straight into its
database.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from controller.cli.embedded import EmbeddedServer
from controller.errors import ForbiddenError, UnauthorizedError
from controller.intake import tokens
from controller.intake.event_batch import EventRequest, IncomingEvent
from controller.intake.ingest import write_group
from controller.intake.tokens import hash_token
from controller.settings import Settings
from sandbox_image.contract import EventType
from tests.sandbox_rows import seed_running

RUN = "run-credentials"
EVENT = {"id": "e1", "seq": 1, "type": "started", "time": "2026-11-21T12:00:00Z", "data": {}}
UNSIGNED = {"attempt": 1, "signature": "0" * 64}


@pytest.fixture
def server(tmp_path: Any) -> Iterator[EmbeddedServer]:
    settings = Settings(data_dir=tmp_path / "data")
    with EmbeddedServer(settings, start_controller=False) as served:
        seed_running(served.controller.engine, RUN, {"sb-a": "token-a", "sb-b": "token-b"})
        yield served


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Every constant-time comparison the sandbox-token rule makes (and still makes it)."""
    calls: list[tuple[Any, Any]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens.hmac, "compare_digest", spy)
    return calls


def _post(server: EmbeddedServer, sandbox_id: str, token: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/sandboxes/{sandbox_id}/events", json={"events": [EVENT]},
                      headers={"Authorization": f"Bearer {token}"}, timeout=10)


def _write(server: EmbeddedServer, sandbox_id: str, token: str) -> EventRequest:
    event = IncomingEvent("written-1", 1, EventType.STARTED, datetime.now(UTC), {})
    request = EventRequest(sandbox_id, f"Bearer {token}", [event])
    with server.controller.engine.begin() as conn:
        write_group(conn, [request])
    return request


def test_a_wrong_sandbox_token_is_refused_by_the_body_guard_and_by_ingestion_alike(
    server: EmbeddedServer, compared: list[tuple[Any, Any]]
) -> None:
    guarded = _post(server, "sb-a", "not-the-token")
    assert guarded.status_code == 401, guarded.text
    assert guarded.json()["error"]["message"] == "unknown sandbox token"  # the body guard's
    assert compared, "the body guard compared the token in constant time"

    compared.clear()
    written = _write(server, "sb-a", "not-the-token")
    assert isinstance(written.error, UnauthorizedError), written.error
    assert "invalid token for sandbox sb-a" in written.error.message
    assert compared, "ingestion compared the token in constant time"

    # Another sandbox's token: the guard lets the route name it, ingestion says 403.
    other = _post(server, "sb-a", "token-b")
    assert other.status_code == 403, other.text
    assert isinstance(_write(server, "sb-a", "token-b").error, ForbiddenError)
    # The right token passes both.
    assert _post(server, "sb-a", "token-a").status_code == 200
    assert _write(server, "sb-a", "token-a").error is None


def test_the_body_guard_compares_the_right_token_in_constant_time_too(
    server: EmbeddedServer, compared: list[tuple[Any, Any]]
) -> None:
    """A batch the route refuses (422) never reaches ingestion: every comparison seen is
    the body guard's, and the right token's hash was compared with compare_digest, on
    equal lengths (nothing returns early)."""
    refused = httpx.post(f"{server.url}/v1/sandboxes/sb-b/events", json={"events": "none"},
                         headers={"Authorization": "Bearer token-b"}, timeout=10)
    assert refused.status_code == 422, refused.text  # past the guard: the token was right
    assert (hash_token("token-b"), hash_token("token-b")) in compared
    assert all(len(a) == len(b) for a, b in compared)


@pytest.mark.parametrize("path", ["inputs/items", "inputs/resume", "inputs/stage"])
def test_an_unknown_sandbox_gets_the_answer_of_a_wrong_signature_for_its_inputs(
    server: EmbeddedServer, path: str
) -> None:
    known = httpx.get(f"{server.url}/v1/sandboxes/sb-a/{path}", params=UNSIGNED, timeout=10)
    unknown = httpx.get(f"{server.url}/v1/sandboxes/sb-nobody/{path}", params=UNSIGNED,
                        timeout=10)
    assert known.status_code == unknown.status_code == 401, (known.text, unknown.text)
    assert known.headers["www-authenticate"] == unknown.headers["www-authenticate"] == "Bearer"
    first, second = known.json()["error"], unknown.json()["error"]
    assert first["message"].replace("sb-a", "ID") == second["message"].replace("sb-nobody", "ID")
    assert first["hint"] == second["hint"]


def test_an_unknown_sandbox_gets_the_answer_of_a_wrong_signature_for_its_upload(
    server: EmbeddedServer,
) -> None:
    answers = [httpx.put(f"{server.url}/v1/sandboxes/{sandbox_id}/snapshot", params=UNSIGNED,
                         content=b"x", timeout=10) for sandbox_id in ("sb-a", "sb-nobody")]
    assert [a.status_code for a in answers] == [401, 401], [a.text for a in answers]
    first, second = (a.json()["error"] for a in answers)
    assert first["message"].replace("sb-a", "ID") == second["message"].replace("sb-nobody", "ID")
