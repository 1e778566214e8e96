"""Issue 25, finding 6: the dashboard's session was a permanent credential.

The cookie was `sha256(constant ‖ token)`: computable offline, valid forever, not ended
by logout (replayed after logout: `GET /v1/runs` 200). Now it is a random value kept
server-side with an expiry, revoked at logout; failed logins are throttled per client,
and `simplectl serve` refuses API tokens shorter than 32 characters.
"""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import create_engine, update

from controller.api.auth import SESSION_COOKIE
from controller.api.sessions import LOGIN_FAILURES_MAX
from controller.db.schema import sessions
from controller.settings import Settings
from tests.ci.conftest import SIMPLECTL, Served, clean_env, free_port


def log_in(served: Served) -> str:
    """POST the login form; the session cookie's value (checked: not Secure on loopback)."""
    response = httpx.post(f"{served.url}/login", data={"token": served.token, "next": "/"},
                          timeout=15)
    assert response.status_code == 303, response.text
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "Secure" not in cookie  # served on 127.0.0.1
    found = re.search(f"{SESSION_COOKIE}=([^;]+)", cookie)
    assert found and served.token not in cookie
    return found.group(1)


def with_cookie(served: Served, value: str) -> httpx.Client:
    return httpx.Client(base_url=served.url, cookies={SESSION_COOKIE: value}, timeout=15)


def test_a_cookie_replayed_after_logout_is_refused(served: Served) -> None:
    value = log_in(served)
    with with_cookie(served, value) as browser:
        assert browser.get("/v1/runs").status_code == 200
        page = browser.get("/")
        csrf = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page.text)
        assert page.status_code == 200 and csrf
        out = browser.post("/logout", headers={"X-CSRF-Token": csrf.group(1)})
        assert out.status_code == 303
    with with_cookie(served, value) as replay:  # a copy of the cookie, kept from before
        refused = replay.get("/v1/runs")
        assert refused.status_code == 401, refused.text
        assert replay.get("/").status_code == 303  # to the login form
        assert replay.post("/v1/plans", json={"templates": ["ci_ok"]}).status_code == 401


def test_an_expired_session_is_refused(served: Served, settings: Settings) -> None:
    value = log_in(served)
    with with_cookie(served, value) as browser:
        assert browser.get("/v1/runs").status_code == 200
        engine = create_engine(settings.resolved_database_url)  # the served controller's
        with engine.begin() as conn:
            conn.execute(update(sessions).values(
                expires_at=datetime.now(UTC) - timedelta(seconds=1)))
        engine.dispose()
        assert browser.get("/v1/runs").status_code == 401


def test_failed_logins_are_throttled_per_client(served: Served) -> None:
    for _ in range(LOGIN_FAILURES_MAX):
        wrong = httpx.post(f"{served.url}/login", data={"token": "guess"}, timeout=15)
        assert wrong.status_code == 401
    throttled = httpx.post(f"{served.url}/login", data={"token": served.token}, timeout=15)
    assert throttled.status_code == 429, throttled.text
    assert "too many failed logins" in throttled.json()["error"]["message"]


def test_serve_refuses_tokens_shorter_than_32_characters() -> None:
    env = clean_env(SIMPLE_API_TOKENS=f"short-token, {'x' * 40}")
    done = subprocess.run(
        [*SIMPLECTL, "serve", "--host", "127.0.0.1", "--port", str(free_port())],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert "shorter than 32 characters (number 1 in the list)" in done.stderr
    assert "short-token" not in done.stderr  # a token is never echoed
