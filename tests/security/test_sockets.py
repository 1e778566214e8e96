"""Issue 25, findings 2 and 3: WebSockets without a token, web pages and rebound names.

The review's attacks on a served controller: 8 token-less sockets each sending a
12-16 MiB message raised the controller's peak memory by ~200 MB (the socket was
accepted before its token was checked, and uvicorn buffers frames up to 16 MiB); a
page on another site opened `ws://127.0.0.1:…/v1/chat/ws` and got a plan back; a
rebound name (Host and Origin both the attacker's) got `POST /v1/plans` 200.
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from controller.api.hosts import allowed_hosts, host_name
from controller.api.sockets import UNAUTHENTICATED_SOCKETS_MAX
from controller.settings import Settings
from tests.ci.conftest import Served, ServeFactory
from tests.security.test_bodies import vm_hwm_kib

pytestmark = pytest.mark.once
MESSAGE_BYTES = 12 * 1024 * 1024


def ws_url(served: Served) -> str:
    return served.url.replace("http://", "ws://") + "/v1/chat/ws"


def refused_status(url: str, **kwargs: Any) -> int | None:
    """The HTTP status a refused handshake got, or None if the socket was accepted."""
    try:
        with connect(url, open_timeout=15, **kwargs):
            return None
    except InvalidStatus as e:
        return int(e.response.status_code)


def send_quietly(ws: ClientConnection, payload: str) -> None:
    with contextlib.suppress(Exception):  # the server closes (1009) part-way: expected
        ws.send(payload)
        ws.recv(timeout=15)


@pytest.mark.slow
def test_token_less_sockets_sending_large_messages_cost_under_20_mb(served: Served) -> None:
    with served.client() as http:  # warm the routes up before the baseline
        http.post("/v1/plans", json={"templates": ["ci_ok"]})
    with connect(ws_url(served), additional_headers=served.headers) as ws:
        ws.send('{"message": "what\'s running?"}')
        ws.recv(timeout=15)
    before = vm_hwm_kib(served.process.pid)
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(connect(ws_url(served), open_timeout=15, max_size=None))
                   for _ in range(UNAUTHENTICATED_SOCKETS_MAX)]
        # Past the cap of sockets waiting for a token: refused before the handshake.
        assert refused_status(ws_url(served)) == 403
        payload = '{"token": "' + "x" * MESSAGE_BYTES + '"}'
        senders = [threading.Thread(target=send_quietly, args=(ws, payload)) for ws in sockets]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(timeout=60)
    grown_mib = (vm_hwm_kib(served.process.pid) - before) / 1024
    assert grown_mib < 20, f"the controller's peak memory grew by {grown_mib:.0f} MiB"
    # The slots were given back: a browser's token message still works.
    with connect(ws_url(served), open_timeout=15) as ws:
        ws.send(json.dumps({"token": served.token}))
        ws.send('{"message": "what\'s running?"}')
        assert '"reply"' in ws.recv(timeout=15)


def test_a_wrong_token_is_refused_before_the_handshake(served: Served) -> None:
    headers = {"Authorization": "Bearer wrong"}
    assert refused_status(ws_url(served), additional_headers=headers) == 403


def test_a_cross_site_socket_is_refused(served: Served) -> None:
    # Even with a valid token (a browser's page would send the victim's session cookie).
    evil = refused_status(ws_url(served), origin="http://evil.example",
                          additional_headers=served.headers)
    assert evil == 403
    null = refused_status(ws_url(served), origin="null", additional_headers=served.headers)
    assert null == 403
    own = refused_status(ws_url(served), origin=served.url, additional_headers=served.headers)
    assert own is None


def test_a_rebound_host_is_refused_on_a_token_less_controller(serve: ServeFactory) -> None:
    served = serve(SIMPLE_API_TOKENS="")  # loopback without tokens: what a page would find
    evil = {"Host": "evil.example", "Origin": "http://evil.example"}
    body = {"templates": ["ci_ok"]}
    rebound = httpx.post(f"{served.url}/v1/plans", json=body, headers=evil, timeout=15)
    assert rebound.status_code == 400, rebound.text
    assert rebound.json()["error"]["code"] == "invalid_host"
    own = httpx.post(f"{served.url}/v1/plans", json=body, timeout=15)
    assert own.status_code == 200, own.text
    named = httpx.get(f"{served.url}/v1/runs", headers={"Host": "localhost"}, timeout=15)
    assert named.status_code == 200
    # a load balancer's or kubelet's probe addresses the controller by IP: answered
    for probe in ("/healthz", "/readyz"):
        assert httpx.get(f"{served.url}{probe}", headers={"Host": "10.1.2.3:8080"},
                         timeout=15).status_code == 200
    assert httpx.get(f"{served.url}/v1/runs", headers={"Host": "10.1.2.3:8080"},
                     timeout=15).status_code == 400
    assert refused_status(ws_url(served), additional_headers={"Host": "evil.example"}) == 400


def test_allowed_hosts_are_the_loopback_names_the_controller_url_and_the_setting() -> None:
    settings = Settings(controller_url="http://simple.ns.svc:8080", allowed_hosts="a.example")
    hosts = allowed_hosts(settings)
    assert {"127.0.0.1", "localhost", "::1", "simple.ns.svc", "a.example"} <= hosts
    assert "evil.example" not in hosts
    assert [host_name(h) for h in ("[::1]:80", "LocalHost:8080", "a.example.")] == [
        "::1", "localhost", "a.example"]
