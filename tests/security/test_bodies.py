"""Finding 2: bodies were read and parsed before auth or size checks; events had no cap.

The review's attack: a 300 MB POST without a token to `/v1/sandboxes/nosuch/events`
raised the controller's memory from 87 MB to 1.3 GB before it answered 422. Now any
request with a body is judged on its headers: 401 or 413 before it is read.
"""

from __future__ import annotations

import json
import select
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.ci.conftest import Served, ServeFactory

BODY_MB = 200
CHUNK = 64 * 1024


def vm_hwm_kib(pid: int) -> int:
    """The process's peak resident memory (VmHWM in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def send_big_body(url: str, method: str, path: str, chunked: bool, headers: str = "") -> int:
    """Send headers then up to 200 MB of body; stop when the answer comes. Its status."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    framing = (
        "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {BODY_MB << 20}\r\n"
    )
    sock.sendall(
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"{headers}{framing}\r\n".encode()
    )
    piece = b"[" * CHUNK
    if chunked:
        piece = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    answer = b""
    try:
        # An answer before the body must be read before sending on: once the server closes
        # with body bytes unread, the connection is reset and the answer lost.
        if not select.select([sock], [], [], 3)[0]:
            for _ in range((BODY_MB << 20) // CHUNK):
                sock.sendall(piece)
                if select.select([sock], [], [], 0)[0]:
                    break
        answer = sock.recv(65536)
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 "), f"no answer to {method} {path}: {answer[:200]!r}"
    return int(answer.split()[1])


ATTACKS = [
    ("POST", "/v1/sandboxes/nosuch/events", False),  # the review's request
    ("POST", "/v1/sandboxes/nosuch/events", True),
    ("POST", "/v1/runs", True),
    ("POST", "/v1/plans", False),
    ("PUT", "/v1/sandboxes/nosuch/snapshot?attempt=1&signature=" + "0" * 64, True),
    ("GET", "/healthz", True),
]


@pytest.mark.slow
@pytest.mark.once
def test_a_200_mb_body_without_a_token_costs_under_20_mb(served: Served) -> None:
    with served.client() as http:  # warm the routes up before the baseline
        http.get("/v1/runs")
        http.post("/v1/plans", json={"templates": ["ci_ok"]})
    before = vm_hwm_kib(served.process.pid)
    statuses = {}
    for method, path, chunked in ATTACKS:
        statuses[(method, path, chunked)] = send_big_body(served.url, method, path, chunked)
    grown_mib = (vm_hwm_kib(served.process.pid) - before) / 1024
    assert all(status in (401, 413) for status in statuses.values()), statuses
    assert grown_mib < 20, f"the controller's peak memory grew by {grown_mib:.0f} MiB"
    assert httpx.get(f"{served.url}/healthz", timeout=10).status_code == 200


def test_a_wrong_token_gets_its_401_even_when_the_body_comes_late(served: Served) -> None:
    """A small body sent after its headers (as HTTP clients do: two writes) is read and
    dropped before the 401. Answered at the headers with the connection closed, the body
    then met a closed socket: the server's kernel reset the connection and the client's
    dropped the 401 it had not read yet (a schemathesis run in CI saw that reset)."""
    host, port = served.url.removeprefix("http://").split(":")
    body = json.dumps({"templates": ["ci_ok"]}).encode()
    head = (
        f"POST /v1/plans HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer wrong\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for _ in range(2):  # the connection stays usable after the 401
            sock.sendall(head)
            time.sleep(0.3)  # the server has the headers alone
            sock.sendall(body)
            time.sleep(0.3)  # a reset would arrive now, before the answer is read
            answer = sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
            assert b"invalid API token" in answer


def test_an_oversized_body_gets_413_naming_the_limit(served: Served) -> None:
    big = b'{"templates": ["' + b"x" * (2 << 20) + b'"]}'
    with served.client() as http:
        by_length = http.post("/v1/plans", content=big)

        def chunks():  # no Content-Length: counted while it streams
            for i in range(0, len(big), CHUNK):
                yield big[i : i + CHUNK]

        streamed = http.post("/v1/plans", content=chunks())
    for response in (by_length, streamed):
        assert response.status_code == 413, response.text
        error = response.json()["error"]
        assert "1048576-byte limit" in error["message"]
        assert "SIMPLE_MAX_BODY_BYTES" in error["hint"]


def event(seq: int, data: dict[str, object] | None = None, kind: str = "progress") -> dict:
    return {"id": f"e{seq}", "seq": seq, "type": kind, "time": "2026-01-01T00:00:00Z",
            "data": data or {}}


def answers(served: Served, sandbox_id: str) -> list[tuple[int, str]]:
    with served.client() as http:
        text = http.get(f"/v1/sandboxes/{sandbox_id}/logs").text
    return [
        (int(line.split()[1]), line.split(" ", 2)[2])
        for line in text.splitlines()
        if line.startswith("ANSWER ")
    ]


def run_events_sandbox(served: Served, tmp_path: Path, plans: dict[str, dict], **run: object
                       ) -> tuple[dict, dict[str, list[tuple[int, str]]]]:
    """Run the hostile `post_events` templates with `plans`; the run and each one's answers."""
    (tmp_path / "events_script.input").write_text(json.dumps(plans))
    with served.client() as http:
        run_id = http.post("/v1/runs", json={"templates": list(plans), **run}).json()["run_id"]
    finished = served.wait_run(run_id, timeout_s=90)
    found = {s["template_id"]: answers(served, s["sandbox_id"]) for s in finished["sandboxes"]}
    return finished, found


def test_a_sandbox_cannot_post_past_its_event_caps(serve: ServeFactory, tmp_path: Path) -> None:
    served = serve(SIMPLE_EVENTS_MAX_PER_ATTEMPT="50", SIMPLE_EVENTS_MAX_BYTES_PER_ATTEMPT="300000")
    fat = {"blob": "x" * 50_000}
    bodies = [
        {"events": [event(i, fat) for i in range(1, 5)]},  # ~200 kB: within the byte cap
        {"events": [event(i, fat) for i in range(5, 9)]},  # would pass 300,000 bytes
        {"events": [event(i) for i in range(5, 25)]},  # 24 events
        {"events": [event(i) for i in range(25, 45)]},  # 44 events
        {"events": [event(i) for i in range(45, 65)]},  # would pass 50 events
    ]
    plan = {"post_events": {"bodies": [json.dumps(b) for b in bodies]}}
    _, found = run_events_sandbox(served, tmp_path, plan)
    got = found["post_events"]
    assert [status for status, _ in got] == [200, 413, 200, 200, 429], got
    assert "cap of 300000 bytes per attempt" in got[1][1]
    assert "cap of 50 events per attempt" in got[4][1]


def test_a_negative_cost_cannot_cancel_another_sandboxs(served: Served, tmp_path: Path) -> None:
    """Finding 3: -1e6 next to a $50 sandbox turned a budget_exceeded run into succeeded."""
    honest = {"events": [event(1, {"cost_usd": 50.0, "tokens": 10})]}
    offset = {"events": [event(1, {"cost_usd": -1e6})]}
    plans = {
        "post_events": {"delay_s": 2, "bodies": [json.dumps(honest)], "after_s": 4},
        "post_events_b": {"bodies": [json.dumps(offset)], "after_s": 6},
    }
    finished, found = run_events_sandbox(served, tmp_path, plans, budget_usd=10)
    assert finished["status"] == "budget_exceeded", finished
    status, text = found["post_events_b"][0]
    assert status == 422 and "data.cost_usd is -1000000.0: numbers must be >= 0" in text


def strict(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def test_infinite_values_are_refused_and_the_stream_stays_json(
    served: Served, tmp_path: Path
) -> None:
    """Finding 3: `1e999` was stored as Inf and the SSE stream emitted a bare `Infinity`."""
    infinite = '{"events": [{"id": "inf", "seq": 1, "type": "progress", ' \
               '"time": "2026-01-01T00:00:00Z", "data": {"cost_usd": 1e999, "tokens": 5}}]}'
    nan = infinite.replace('"inf"', '"nan"').replace("1e999", "NaN")
    fine = json.dumps({"events": [event(2, {"cost_usd": 1.5})]})
    plans = {"post_events": {"bodies": [infinite, nan, fine]}}
    finished, found = run_events_sandbox(served, tmp_path, plans)
    statuses = [status for status, _ in found["post_events"]]
    assert statuses == [422, 422, 200], found
    assert "must be finite" in found["post_events"][0][1]
    with served.client() as http:
        stream = http.get(f"/v1/runs/{finished['run_id']}/stream", timeout=30).text
    messages = [line[len("data: "):] for line in stream.splitlines() if line.startswith("data: ")]
    assert messages and "end" in stream
    for message in messages:
        json.loads(message, parse_constant=strict)


def test_the_stream_writes_a_stored_non_finite_number_as_null() -> None:
    from controller.api.routes.stream import strict_json

    assert json.loads(strict_json({"a": [float("inf"), 1.5, float("nan")]})) == {
        "a": [None, 1.5, None]
    }

