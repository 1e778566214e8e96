"""The address sandboxes are given serves only the sandbox routes (no Docker needed).

A controller without API tokens listens on 127.0.0.1 (its API) and on 127.0.0.2,
standing in for the `simple` network's gateway: there, every API route answers 401
while the sandbox contract's routes reach their own checks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from controller.api.app import create_app
from controller.api.listeners import SandboxOnlyAddresses
from controller.cli.embedded import bound_socket
from controller.service import Controller
from controller.settings import Settings

SANDBOX_SIDE = "127.0.0.2"


@pytest.fixture
def two_addresses(settings: Settings) -> Iterator[tuple[str, str]]:
    api_sock, sandbox_sock = bound_socket("127.0.0.1"), bound_socket(SANDBOX_SIDE)
    # As the embedded server does: sandboxes are told the sandbox-side address (it is
    # then a Host name the controller answers to).
    sandbox_url = f"http://{SANDBOX_SIDE}:{sandbox_sock.getsockname()[1]}"
    controller = Controller(settings.model_copy(update={"controller_url": sandbox_url}))
    app = SandboxOnlyAddresses(create_app(controller), [SANDBOX_SIDE])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [api_sock, sandbox_sock]},
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield (f"http://127.0.0.1:{api_sock.getsockname()[1]}",
               f"http://{SANDBOX_SIDE}:{sandbox_sock.getsockname()[1]}")
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        api_sock.close()
        sandbox_sock.close()


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/runs"), ("POST", "/v1/runs"), ("GET", "/v1/templates"),
    ("POST", "/v1/plans"), ("GET", "/v1/sandboxes/sbx-1"), ("GET", "/v1/sandboxes/sbx-1/logs"),
    ("GET", "/readyz"), ("GET", "/docs"), ("GET", "/openapi.json"), ("GET", "/"),
])
def test_api_routes_are_refused_on_the_sandbox_address(
    two_addresses: tuple[str, str], method: str, path: str
) -> None:
    api, sandbox_side = two_addresses
    body = {"names": ["quick"], "max_parallel": 0}  # refused by its own check: no run starts
    refused = httpx.request(method, sandbox_side + path, json=body, timeout=10)
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == "this address serves only the sandbox routes"
    # the same route on the API address is not refused for its address
    served = httpx.request(method, api + path, json=body, timeout=10)
    assert served.status_code != 401 or "sandbox routes" not in served.text
    if method == "POST":  # reached the route: its own validation answered
        assert served.status_code == 422 and served.json()["error"]["field"] == "max_parallel"


def test_sandbox_routes_reach_their_own_checks(two_addresses: tuple[str, str]) -> None:
    _, sandbox_side = two_addresses
    assert httpx.get(f"{sandbox_side}/healthz", timeout=10).status_code == 200
    events = httpx.post(f"{sandbox_side}/v1/sandboxes/sbx-nope/events",
                        json={"events": []}, headers={"Authorization": "Bearer wrong"},
                        timeout=10)
    snapshot = httpx.put(f"{sandbox_side}/v1/sandboxes/sbx-nope/snapshot?attempt=1&signature=x",
                         content=b"x", timeout=10)
    signed = {"attempt": 1, "signature": "0" * 64}
    inputs = [httpx.get(f"{sandbox_side}/v1/sandboxes/sbx-nope/{path}", params=signed, timeout=10)
              for path in ("inputs/stage", "inputs/items", "inputs/resume")]
    for answer in (events, snapshot, *inputs):
        assert "sandbox routes" not in answer.text, answer.text  # the route itself answered
        assert answer.status_code in (401, 403, 404, 422), answer.text
