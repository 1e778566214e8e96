"""The principal over HTTP (POST /v1/chat) and a WebSocket (/v1/chat/ws), on a served controller.

The catalog adds three small templates to the built-in one: `cheap_one` (well under
the confirmation threshold), `pricey` (its max estimate, $60, is above the default $25)
and `slow_one` (runs for a while, reporting cost). Runs use the real process backend.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from controller.cli.embedded import EmbeddedServer
from controller.settings import Settings
from tests.e2e_helpers import cancel_active_runs

# No database behaviour of its own (or its own SQLite file): once is enough in CI.
pytestmark = pytest.mark.once

CATALOG = """
templates:
  - id: cheap_one
    category: chat-tests
    estimate: {cost_usd: [0.1, 0.5], runtime_s: [1, 5]}
    timeout_s: 120
    config: {agents: 2, steps: 2}
  - id: pricey
    category: chat-tests
    estimate: {cost_usd: [30, 60], runtime_s: [1, 5]}
    timeout_s: 120
    config: {agents: 2, steps: 2}
  - id: failing_one
    category: chat-tests
    estimate: {cost_usd: [0.1, 0.5], runtime_s: [1, 5]}
    timeout_s: 120
    config: {agents: 2, steps: 2, fail_at_step: 1}
  - id: overrun
    category: chat-tests
    description: reports more cost than its estimate allows
    estimate: {cost_usd: [0.0, 0.001], runtime_s: [1, 5]}
    timeout_s: 120
    config: {agents: 2, steps: 3}
  - id: slow_one
    category: chat-tests
    estimate: {cost_usd: [0.1, 0.5], runtime_s: [1, 600]}
    timeout_s: 600
    config: {agents: 2, steps: 400, llm_latency_ms: 40}
"""
ACTIVE = {"pending", "running"}


def wait_for(check: Callable[[], Any], timeout_s: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    root = tmp_path_factory.mktemp("chat")
    (root / "catalog").mkdir()
    (root / "catalog" / "chat.yaml").write_text(CATALOG)
    settings = Settings(
        data_dir=root / "data", database_url=f"sqlite:///{root / 'simple.db'}",
        reconcile_interval_s=0.2, catalog_dirs=[root / "catalog"], max_attempts=1,
        api_tokens=["t1", "t2"], chat_max_conversations=50,
    )
    with EmbeddedServer(settings) as server:
        yield server
        with _client(server) as client:
            cancel_active_runs(client)


def _client(server: EmbeddedServer, token: str = "t1") -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30,
                        headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def client(served: EmbeddedServer) -> Iterator[httpx.Client]:
    with _client(served) as client:
        yield client


def say(client: httpx.Client, message: str, conversation: str | None = None,
        confirm: bool = False) -> dict[str, Any]:
    response = client.post("/v1/chat", json={"message": message, "conversation_id": conversation,
                                             "confirm": confirm})
    assert response.status_code == 200, response.text
    return dict(response.json())


def run_ids(client: httpx.Client) -> set[str]:
    return {r["run_id"] for r in client.get("/v1/runs").json()["runs"]}


# --- HTTP ------------------------------------------------------------------------------


@pytest.mark.parametrize("message", ["hmm", "no breakfast", "be thorough", "under $5",
                                     "run simulations for corporate analysis"])
def test_ambiguous_or_empty_gets_choices_not_a_run(client: httpx.Client, message: str) -> None:
    before = run_ids(client)
    reply = say(client, message)
    assert reply["kind"] == "choices"
    assert reply["choices"] and reply["run"] is None
    first = reply["choices"][0]
    assert first["key"] == "A" and first["count"] > 0 and len(first["estimated_cost_usd"]) == 2
    assert "A) " in reply["text"]
    assert run_ids(client) == before


def test_a_choice_is_picked_by_its_letter(client: httpx.Client) -> None:
    before = run_ids(client)
    reply = say(client, "under $6, 2 at a time")  # only the quick suite fits
    assert [c["suites"] for c in reply["choices"]] == [["quick"]]
    picked = say(client, "a", reply["conversation_id"])
    assert picked["kind"] == "plan"  # no "run" was said: a plan, waiting for a yes
    assert picked["plan"]["budget_usd"] == 6 and picked["plan"]["max_parallel"] == 2
    assert len(picked["plan"]["selected"]) == 7
    assert run_ids(client) == before


def test_above_the_threshold_starts_nothing_until_confirmed(client: httpx.Client) -> None:
    before = run_ids(client)
    reply = say(client, "run pricey")
    assert reply["kind"] == "confirm" and reply["needs_confirmation"]
    assert reply["plan"]["selected"] == ["pricey"]
    assert "$60.00 is above the $25.00" in reply["text"]
    time.sleep(0.5)
    assert run_ids(client) == before
    declined = say(client, "no", reply["conversation_id"])
    assert declined["kind"] == "declined"
    assert say(client, "yes", reply["conversation_id"])["kind"] != "started"
    assert run_ids(client) == before

    again = say(client, "run pricey")
    started = say(client, "yes", again["conversation_id"])
    assert started["kind"] == "started"
    assert run_ids(client) == before | {started["run"]["run_id"]}


def test_confirm_flag_starts_at_once(client: httpx.Client) -> None:
    reply = say(client, "run pricey", confirm=True)
    assert reply["kind"] == "started" and not reply["needs_confirmation"]


def test_below_the_threshold_a_run_request_starts(client: httpx.Client) -> None:
    reply = say(client, "run cheap_one, 1 at a time")
    assert reply["kind"] == "started"
    assert reply["plan"]["max_parallel"] == 1
    assert reply["interpretation"]["phrases"]


def test_a_plan_request_only_plans(client: httpx.Client) -> None:
    before = run_ids(client)
    reply = say(client, "plan cheap_one under $5")
    assert reply["kind"] == "plan" and reply["needs_confirmation"]
    assert run_ids(client) == before


def test_questions_are_answered_from_the_database(client: httpx.Client) -> None:
    started = say(client, "run failing_one and cheap_one")
    run_id = started["run"]["run_id"]
    conversation = started["conversation_id"]
    wait_for(lambda: client.get(f"/v1/runs/{run_id}").json()["status"] not in ACTIVE, 60, "run")
    failed = say(client, "what failed and why?", conversation)
    assert failed["kind"] == "answer"
    assert "failing_one: failed" in failed["text"]
    assert [s["template_id"] for s in failed["answer"]["failed"]] == ["failing_one"]
    cost = say(client, f"what has run {run_id} cost so far?")
    assert cost["answer"]["run_id"] == run_id
    assert f"{run_id} has cost $" in cost["text"]
    assert cost["answer"]["cost_usd"] > 0


def test_cancel_asks_first(client: httpx.Client) -> None:
    started = say(client, "run slow_one")
    run_id = started["run"]["run_id"]
    reply = say(client, f"cancel {run_id}")
    assert reply["kind"] == "confirm" and reply["needs_confirmation"]
    assert client.get(f"/v1/runs/{run_id}").json()["cancel_requested"] is False
    done = say(client, "yes", reply["conversation_id"])
    assert done["kind"] == "cancel_requested"
    assert client.get(f"/v1/runs/{run_id}").json()["cancel_requested"] is True


def test_conversations_belong_to_their_token(served: EmbeddedServer) -> None:
    with _client(served, "t1") as one, _client(served, "t2") as two:
        conversation = say(one, "run pricey")["conversation_id"]
        stolen = two.post("/v1/chat", json={"message": "yes", "conversation_id": conversation})
        assert stolen.status_code == 404
        assert stolen.json()["error"]["code"] == "not_found"
        anonymous = httpx.post(f"{served.url}/v1/chat", json={"message": "hi"})
        assert anonymous.status_code == 401


@pytest.mark.parametrize(("body", "field"), [
    ({"message": "x" * 2001}, "message"),
    ({"message": ""}, "message"),
    ({"message": "hi", "conversation_id": "../etc"}, "conversation_id"),
    ({"message": "hi", "extra": 1}, "extra"),
])
def test_bad_turns_are_422_naming_the_field(client: httpx.Client, body: dict[str, Any],
                                            field: str) -> None:
    response = client.post("/v1/chat", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == field


def test_the_number_of_conversations_is_bounded(client: httpx.Client,
                                                served: EmbeddedServer) -> None:
    first = say(client, "run pricey")["conversation_id"]
    for _ in range(50):
        say(client, "hmm")
    gone = client.post("/v1/chat", json={"message": "yes", "conversation_id": first})
    assert gone.status_code == 404
    principal = served.server.config.app.state.principal  # type: ignore[attr-defined]
    assert len(principal.conversations) <= 50


# --- WebSocket -------------------------------------------------------------------------


def ws_url(served: EmbeddedServer) -> str:
    return served.url.replace("http://", "ws://") + "/v1/chat/ws"


def ws_say(ws: Any, message: str, confirm: bool = False) -> dict[str, Any]:
    ws.send(json.dumps({"message": message, "confirm": confirm}))
    while True:
        data = json.loads(ws.recv(timeout=30))
        if data["type"] != "notice":
            return dict(data)


def test_ws_choices_confirmation_and_start(served: EmbeddedServer, client: httpx.Client) -> None:
    before = run_ids(client)
    with connect(ws_url(served), additional_headers={"Authorization": "Bearer t1"}) as ws:
        choices = ws_say(ws, "be thorough")
        assert choices["type"] == "reply" and choices["kind"] == "choices"
        assert [c["key"] for c in choices["choices"]] == ["A", "B"]
        pending = ws_say(ws, "run pricey")
        assert pending["kind"] == "confirm" and pending["needs_confirmation"]
        assert pending["conversation_id"] == choices["conversation_id"]
        time.sleep(0.5)
        assert run_ids(client) == before
        started = ws_say(ws, "yes")
        assert started["kind"] == "started"
    assert run_ids(client) == before | {started["run"]["run_id"]}


def test_ws_needs_a_token_and_takes_it_in_a_first_message(served: EmbeddedServer) -> None:
    with connect(ws_url(served)) as ws:
        ws.send(json.dumps({"token": "wrong"}))
        refused = json.loads(ws.recv(timeout=15))
        assert refused["type"] == "error" and refused["error"]["code"] == "unauthorized"
    with connect(ws_url(served)) as ws:
        ws.send(json.dumps({"token": "t2"}))
        assert ws_say(ws, "hmm")["kind"] == "choices"


def test_ws_bad_messages_get_errors_and_the_socket_goes_on(served: EmbeddedServer) -> None:
    with connect(ws_url(served), additional_headers={"Authorization": "Bearer t1"}) as ws:
        ws.send("not json")
        assert json.loads(ws.recv(timeout=15))["type"] == "error"
        ws.send(json.dumps({"message": ""}))
        error = json.loads(ws.recv(timeout=15))
        assert error["type"] == "error" and "message" in error["error"]["message"]
        assert ws_say(ws, "what's running?")["kind"] == "answer"


def test_ws_too_big_a_message_closes_the_socket(served: EmbeddedServer, tmp_path: Path) -> None:
    from websockets.exceptions import ConnectionClosed

    with connect(ws_url(served), additional_headers={"Authorization": "Bearer t1"}) as ws:
        ws.send("x" * 20_000)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=15)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


# --- simplectl ask during a real run ---------------------------------------------------


def test_simplectl_ask_answers_with_the_live_state_and_cost(
    served: EmbeddedServer, client: httpx.Client
) -> None:
    import os
    import subprocess
    import sys

    started = say(client, "run slow_one")
    run_id = started["run"]["run_id"]

    def costing() -> dict[str, Any] | None:
        sandbox = client.get(f"/v1/runs/{run_id}").json()["sandboxes"][0]
        return sandbox if sandbox["status"] == "running" and sandbox["cost_usd"] > 0 else None

    wait_for(costing, 60, "slow_one to run and report cost")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    env.update(SIMPLE_SERVER=served.url, SIMPLE_TOKEN="t1")
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli", "ask", "--json", "how's slow_one doing?"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    sandbox = reply["answer"]["sandboxes"][0]
    assert sandbox["run_id"] == run_id and sandbox["status"] == "running"
    assert sandbox["cost_usd"] > 0
    assert f"slow_one in {run_id}: running, step " in reply["text"]
    assert f"${sandbox['cost_usd']:,.2f} spent (estimate $0.10-0.50" in reply["text"]
    client.post(f"/v1/runs/{run_id}/cancel")


# --- notices -----------------------------------------------------------------------------


def test_notices_reach_the_run_stream_and_the_conversation(client: httpx.Client) -> None:
    started = say(client, "run overrun")
    run_id = started["run"]["run_id"]
    notices = []
    with client.stream("GET", f"/v1/runs/{run_id}/stream", timeout=60) as stream:
        kind = None
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind == "notice":
                notices.append(json.loads(line.removeprefix("data: ")))
            elif kind == "end":
                break
    assert [n["kind"] for n in notices] == ["cost"]
    assert notices[0]["template_id"] == "overrun"
    assert "above its $0.00 max estimate" in notices[0]["message"]
    followup = say(client, "how is it going?", started["conversation_id"])
    assert [n["key"] for n in followup["notices"]] == [notices[0]["key"]]
    assert "Notice: overrun has cost $" in followup["text"]
    again = say(client, "how is it going?", started["conversation_id"])
    assert again["notices"] == []  # said once


# --- the dashboard's chat panel --------------------------------------------------------


def test_the_dashboard_chat_panel(served: EmbeddedServer) -> None:
    with httpx.Client(base_url=served.url, timeout=30) as browser:
        assert browser.get("/chat").status_code in (303, 307)  # log in first
        browser.post("/login", data={"token": "t1", "next": "/chat"})
        page = browser.get("/chat")
        assert page.status_code == 200
        assert '<script src="/static/chat.js"' in page.text and 'href="/chat"' in page.text
        assert browser.get("/static/chat.js").status_code == 200
        csrf = page.text.split('name="csrf-token" content="')[1].split('"')[0]
        forged = browser.post("/v1/chat", json={"message": "run pricey"})
        assert forged.status_code == 403  # no CSRF header: the cookie alone may not act
        reply = browser.post("/v1/chat", json={"message": "run pricey"},
                             headers={"X-CSRF-Token": csrf}).json()
        assert reply["kind"] == "confirm"
    with _client(served, "t2") as other:
        stolen = other.post("/v1/chat", json={"message": "yes",
                                              "conversation_id": reply["conversation_id"]})
        assert stolen.status_code == 404


def test_ws_pushes_notices_of_the_runs_it_started(served: EmbeddedServer) -> None:
    with connect(ws_url(served), additional_headers={"Authorization": "Bearer t1"}) as ws:
        ws.send(json.dumps({"message": "run overrun"}))
        started = json.loads(ws.recv(timeout=30))
        assert started["kind"] == "started"
        deadline = time.monotonic() + 60
        while True:
            message = json.loads(ws.recv(timeout=max(1.0, deadline - time.monotonic())))
            if message["type"] == "notice":
                break
        assert message["kind"] == "cost" and message["run_id"] == started["run"]["run_id"]


def test_simplectl_chat_is_a_conversation(served: EmbeddedServer) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    env.update(SIMPLE_SERVER=served.url, SIMPLE_TOKEN="t1")
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli", "chat"],
        input="be thorough\nA\nno\nwhat's running?\n\n",
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "A) portal, thorough" in out  # the choices
    assert "4 templates, $25.00-50.00" in out and "Start it? (yes/no)" in out  # A, planned
    assert "nothing was started" in out  # "no"
