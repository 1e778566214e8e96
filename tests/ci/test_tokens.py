"""API tokens on a served controller: every /v1 route needs one (but the sandbox contract's),
they are compared in constant time and never logged, and a sandbox's own token stops
working when its sandbox ends.
"""

from __future__ import annotations

import hmac
import re
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi.security import HTTPAuthorizationCredentials

from controller.api import auth, deps
from controller.api.listeners import is_sandbox_route
from controller.errors import UnauthorizedError
from tests.ci.conftest import Served

# The sandbox contract's routes: they take the sandbox's own token or signed URL.
SANDBOX_ROUTES = {
    ("POST", "/v1/sandboxes/{sandbox_id}/events"),
    ("PUT", "/v1/sandboxes/{sandbox_id}/snapshot"),
    # SIMPLE_ITEMS_URL, SIMPLE_RESUME_URL, SIMPLE_INPUT_URL
    ("GET", "/v1/sandboxes/{sandbox_id}/inputs/{kind}"),
}


def test_the_sandbox_routes_are_the_ones_the_sandbox_address_serves() -> None:
    for method, path in SANDBOX_ROUTES:
        for kind in ("items", "resume", "stage"):
            concrete = path.replace("{sandbox_id}", "sbx-1").replace("{kind}", kind)
            assert is_sandbox_route(method, concrete), (method, concrete)
    assert not is_sandbox_route("GET", "/v1/sandboxes/sbx-1")


def _v1_operations(served: Served) -> list[tuple[str, str]]:
    """Every /v1 operation the served schema documents, from /openapi.json."""
    schema = httpx.get(f"{served.url}/openapi.json", timeout=10).json()
    return sorted(
        (method.upper(), path)
        for path, item in schema["paths"].items()
        if path.startswith("/v1/")
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    )


def _call(served: Served, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    url = served.url + re.sub(r"\{[^}]+\}", "x-unknown", path)
    body: dict[str, Any] | None = {} if method in ("POST", "PUT", "PATCH") else None
    return httpx.request(method, url, headers=headers, timeout=10, json=body)


def _assert_401(response: httpx.Response, message: str) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert error["code"] == "unauthorized" and message in error["message"]
    assert "SIMPLE_TOKEN" in error["hint"] or "SIMPLE_API_TOKENS" in error["hint"]


def test_every_v1_route_but_the_sandbox_contract_needs_a_token(served: Served) -> None:
    operations = _v1_operations(served)
    assert set(operations) >= SANDBOX_ROUTES, "the schema names the sandbox routes"
    guarded = [op for op in operations if op not in SANDBOX_ROUTES]
    assert len(guarded) >= 9, guarded
    for method, path in guarded:
        _assert_401(_call(served, method, path, {}), "this API needs a token")
        _assert_401(
            _call(served, method, path, {"Authorization": "Bearer not-a-token"}),
            "invalid API token",
        )
        for token in served.tokens:  # SIMPLE_API_TOKENS is a comma-separated list
            answer = _call(served, method, path, {"Authorization": f"Bearer {token}"})
            assert answer.status_code != 401, (method, path, answer.text)
    for path in ("/healthz", "/readyz", "/openapi.json"):
        assert httpx.get(served.url + path, timeout=10).status_code == 200, path

    # The schema says so too, so /docs and API tools send the token.
    schema = httpx.get(f"{served.url}/openapi.json", timeout=10).json()
    scheme = schema["components"]["securitySchemes"]["apiToken"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for method, path in _v1_operations(served):
        security = schema["paths"][path][method.lower()].get("security")
        if (method, path) in SANDBOX_ROUTES:
            assert not security, (method, path)
        else:
            assert security == [{"apiToken": []}], (method, path)


@pytest.fixture
def compare_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Record every hmac.compare_digest call (and still compare)."""
    calls: list[tuple[Any, Any]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    return calls


def _check(tokens: list[str], given: str | None) -> None:
    controller: Any = SimpleNamespace(settings=SimpleNamespace(api_tokens=tokens))
    no_sessions: Any = SimpleNamespace(live=lambda value: False)
    credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=given or "")
    deps.require_api_token(controller, no_sessions, credentials if given else None)


def test_tokens_are_compared_with_hmac_compare_digest_against_every_token(
    compare_calls: list[tuple[Any, Any]],
) -> None:
    tokens = ["alpha-token", "beta-token", "gamma-token"]
    _check(tokens, "alpha-token")  # the first matches: the others are compared all the same
    assert len(compare_calls) == 3
    _check(tokens, "gamma-token")
    assert len(compare_calls) == 6
    with pytest.raises(UnauthorizedError, match="invalid API token"):
        _check(tokens, "alpha-token-but-longer")
    assert len(compare_calls) == 9
    assert {len(a) for a, _ in compare_calls} == {len(b) for _, b in compare_calls}, (
        "equal lengths: compare_digest returns early on a length mismatch"
    )
    with pytest.raises(UnauthorizedError, match="needs a token"):
        _check(tokens, None)
    _check([], None)  # no tokens set: the embedded default, open on loopback


def test_tokens_never_appear_in_the_server_log(served: Served) -> None:
    wrong = "wrong-0123456789abcdef"
    ok = served.simplectl(*served.remote("run", "ci-ok", "--json"))
    assert ok.returncode == 0, ok.stderr
    failed = served.simplectl(*served.remote("run", "no_such_template"))
    assert failed.returncode == 2
    for token in (*served.tokens, wrong):
        headers = {"Authorization": f"Bearer {token}"}
        httpx.get(f"{served.url}/v1/runs/run-00000000", headers=headers, timeout=10)
        httpx.post(f"{served.url}/v1/runs", json={"names": ["x"]}, headers=headers, timeout=10)
    bad = served.simplectl("status", "--server", served.url, "--token", wrong)
    assert bad.returncode == 2
    log = served.log()
    assert "GET /v1/runs/run-00000000" in log and "401" in log, "the requests were logged"
    for secret in (*served.tokens, wrong):
        assert secret not in log, "a token is in the server's log"


def test_a_sandbox_token_stops_working_when_its_sandbox_ends(served: Served) -> None:
    result = served.simplectl(*served.remote("run", "ci_token", "--json"))
    sandbox_id = re.search(r'"sandbox_id": "([a-z0-9-]+)"', result.stdout)
    assert sandbox_id, result.stdout + result.stderr
    logs = served.simplectl(*served.remote("logs", sandbox_id.group(1)))
    assert logs.returncode == 0, logs.stderr
    token = re.search(r"^SANDBOX_TOKEN=(\S+)$", logs.stdout, re.M)
    assert token, logs.stdout
    assert "EVENT_STATUS=200" in logs.stdout, "the token worked while the sandbox ran"

    url = f"{served.url}/v1/sandboxes/{sandbox_id.group(1)}/events"
    headers = {"Authorization": f"Bearer {token.group(1)}"}
    def post(event_id: str) -> httpx.Response:
        event = {"id": event_id, "seq": 1, "type": "started", "time": "2026-01-01T00:00:00Z",
                 "data": {}}
        return httpx.post(url, json={"events": [event]}, headers=headers, timeout=10)

    # A new event is refused: the token died with its sandbox.
    response = post("after-the-end")
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert "stopped working" in error["message"] and error["hint"]
    # An exact replay of what was stored still gets its stored answer (at-least-once).
    replay = post("token-probe")
    assert replay.status_code == 200, replay.text
    assert replay.json() == {"stored": ["token-probe"], "count": 1}
    assert token.group(1) not in served.log()
