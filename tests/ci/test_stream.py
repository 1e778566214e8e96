"""GET /v1/runs/{id}/stream over a served controller: server-sent events read with httpx.

The run's state comes first, sandbox events follow in the order they were stored
with increasing ids, `end` comes last; Last-Event-ID resumes without gaps or repeats.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select

from controller.cli.client import ApiClient, ApiError
from controller.db.schema import events
from controller.settings import Settings
from tests.ci.conftest import FINAL, Served


@dataclass(frozen=True)
class Message:
    kind: str
    id: int
    data: dict[str, Any]


def _messages(response: httpx.Response) -> Iterator[Message]:
    """Parse text/event-stream: `id`, `event` and `data` lines, a blank line ends one."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
            continue
        if "data" in fields:
            kind, data = fields.get("event", "message"), json.loads(fields["data"])
            yield Message(kind, int(fields["id"]), data)
        fields = {}


def _stream(served: Served, run_id: str, last_event_id: int | None = None) -> list[Message]:
    headers = dict(served.headers)
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    with httpx.stream(
        "GET", f"{served.url}/v1/runs/{run_id}/stream", headers=headers, timeout=60
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(_messages(response))


def _start(served: Served, *names: str) -> str:
    with served.client() as http:
        response = http.post("/v1/runs", json={"names": list(names)})
    assert response.status_code == 201, response.text
    return str(response.json()["run_id"])


def _stored_event_ids(settings: Settings, run_id: str) -> list[int]:
    engine = create_engine(settings.resolved_database_url)
    try:
        with engine.connect() as conn:
            query = select(events.c.id).where(events.c.run_id == run_id).order_by(events.c.id)
            return [row.id for row in conn.execute(query)]
    finally:
        engine.dispose()


def _sandbox_events(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.kind == "sandbox-event"]


def test_a_live_stream_run_first_events_in_stored_order_end_last(
    served: Served, settings: Settings
) -> None:
    run_id = _start(served, "ci-mixed")
    messages = _stream(served, run_id)

    assert messages[0].kind == "run" and messages[0].data["run_id"] == run_id
    assert messages[-1].kind == "end", "the stream ends with `end`"
    assert [m.kind for m in messages].count("end") == 1
    assert messages[-1].data == {"run_id": run_id, "status": "failed"}
    states = [m.data for m in messages if m.kind == "run"]
    assert states[-1]["status"] == "failed" and states[-1]["status"] in FINAL
    assert len(states) > 1, "the state is sent again as it changes"

    sandbox_events = _sandbox_events(messages)
    ids = [m.id for m in sandbox_events]
    assert ids == sorted(set(ids)), "strictly increasing ids"
    assert ids == _stored_event_ids(settings, run_id), "every stored event, in stored order"
    assert [m.id for m in messages] == sorted(m.id for m in messages), "ids never go back"
    for sandbox in states[-1]["sandboxes"]:
        mine = [m.data for m in sandbox_events if m.data["sandbox_id"] == sandbox["sandbox_id"]]
        assert [e["seq"] for e in mine] == list(range(1, len(mine) + 1))
        assert mine[0]["type"] == "started" and mine[-1]["type"] == "completed"


def test_last_event_id_resumes_with_later_events_and_the_current_state(served: Served) -> None:
    run_id = _start(served, "ci_steps")
    headers = dict(served.headers)
    first: list[Message] = []
    with httpx.stream(
        "GET", f"{served.url}/v1/runs/{run_id}/stream", headers=headers, timeout=60
    ) as response:
        for message in _messages(response):
            first.append(message)
            if message.kind == "sandbox-event":
                break  # the connection drops in the middle of the run
    assert first[0].kind == "run" and first[0].data["status"] in ("pending", "running")
    cut = first[-1].id

    resumed = _stream(served, run_id, last_event_id=cut)
    assert resumed[0].kind == "run" and resumed[0].id == cut, "the current state, at once"
    assert resumed[-1].kind == "end"
    assert all(m.id > cut for m in _sandbox_events(resumed)), "only later events"

    whole = _stream(served, run_id)
    assert [m.data for m in _sandbox_events(first) + _sandbox_events(resumed)] == [
        m.data for m in _sandbox_events(whole)
    ], "no event lost or repeated across the reconnect"

    middle = _sandbox_events(whole)[len(_sandbox_events(whole)) // 2].id
    after_end = _stream(served, run_id, last_event_id=middle)
    assert after_end[0].kind == "run" and after_end[0].data["status"] == "succeeded"
    assert [m.id for m in _sandbox_events(after_end)] == [
        m.id for m in _sandbox_events(whole) if m.id > middle
    ]
    assert after_end[-1] == Message("end", whole[-1].id, {"run_id": run_id, "status": "succeeded"})


def test_the_stream_needs_the_api_token_and_an_existing_run(served: Served) -> None:
    with served.client() as http:
        response = http.get("/v1/runs/run-00000000/stream")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == "not_found" and "run-00000000" in error["message"]
    assert error["hint"]

    run_id = _start(served, "ci-ok")
    url = f"{served.url}/v1/runs/{run_id}/stream"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": served.token}):
        response = httpx.get(url, headers=headers, timeout=10)
        assert response.status_code == 401, (headers, response.text)
        assert response.headers["content-type"].startswith("application/json")
        assert response.json()["error"]["hint"]
        assert response.headers.get("www-authenticate", "").lower().startswith("bearer")
    assert _stream(served, run_id)[-1].kind == "end"


def test_the_cli_stream_client_resumes_after_drops_and_unavailable_answers() -> None:
    """ApiClient.stream_events: 503 and a stream cut before `end` are retried, with
    Last-Event-ID, and nothing is yielded twice."""
    seen_ids: list[str | None] = []
    answers = iter([
        httpx.Response(503, json={"error": {"message": "restarting"}}),
        httpx.Response(200, text='retry: 1000\n\nid: 0\nevent: run\ndata: {"n": 1}\n\n'
                                 'id: 7\nevent: sandbox-event\ndata: {"n": 2}\n\n'),
        httpx.Response(502, text="bad gateway"),
        httpx.Response(200, text='id: 7\nevent: run\ndata: {"n": 3}\n\n'
                                 'id: 9\nevent: end\ndata: {"n": 4}\n\n'),
    ])

    def handler(request: httpx.Request) -> httpx.Response:
        seen_ids.append(request.headers.get("last-event-id"))
        return next(answers)

    http = httpx.Client(base_url="http://simple.test", transport=httpx.MockTransport(handler))
    client = ApiClient(http, attempts=3, base_delay_s=0)
    got = list(client.stream_events("/v1/runs/run-1/stream"))
    assert got == [("run", {"n": 1}), ("sandbox-event", {"n": 2}), ("run", {"n": 3}),
                   ("end", {"n": 4})]
    assert seen_ids == [None, None, "7", "7"]


def test_the_cli_stream_client_gives_up_with_a_clear_message() -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, text="retry: 1000\n\n")  # closes before `end`, every time

    http = httpx.Client(base_url="http://simple.test", transport=httpx.MockTransport(handler))
    client = ApiClient(http, attempts=3, base_delay_s=0)
    with pytest.raises(ApiError, match="after 3 attempts") as lost:
        list(client.stream_events("/v1/runs/run-1/stream"))
    assert "simplectl status" in str(lost.value)
    assert len(calls) == 3
    not_found = httpx.MockTransport(lambda r: httpx.Response(404, json={"error": {
        "code": "not_found", "message": "unknown run run-1", "hint": "list runs"}}))
    client = ApiClient(httpx.Client(base_url="http://simple.test", transport=not_found))
    with pytest.raises(ApiError, match="unknown run run-1") as missing:
        list(client.stream_events("/v1/runs/run-1/stream"))
    assert missing.value.status == 404, "a 404 is not retried"
