"""The dashboard's pages over seeded rows: escaping, the CSP, the session and CSRF rules,
and a 1,000-sandbox run page. No browser here (see test_browser.py), no sandbox runs."""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controller.api.auth import SESSION_COOKIE
from controller.service import Controller
from tests.web.conftest import TOKEN, XSS
from tests.web.seed import seed_run

Make = Callable[..., tuple[Controller, TestClient]]
PAGES = ["/", "/new", "/runs/run-seeded", "/sandboxes/seeded-tpl-0000", "/?status=running"]
ASSETS = [
    "/static/app.css",
    "/static/common.js",
    "/static/run.js",
    "/static/runs.js",
    "/static/sandbox.js",
    "/static/new.js",
    "/live/runs",
    "/runs/run-seeded/report-fragment",
    "/v1/runs/run-seeded/stream",
    "/v1/sandboxes/seeded-tpl-0000/logs",
]


class _Parsed(HTMLParser):
    """What a browser would parse: script sources, inline scripts, on* handlers, styles."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.inline_scripts = 0
        self.handlers: list[str] = []
        self.styled = 0
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        self.handlers += [n for n in names if n.startswith("on")]
        self.styled += "style" in names
        self._in_script = tag == "script"
        if tag == "script" and names.get("src"):
            self.scripts.append(str(names["src"]))

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline_scripts += 1

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False


def _csrf(html: str) -> str:
    found = re.search(r'<meta name="csrf-token" content="([0-9a-f]*)">', html)
    assert found, "every page carries its CSRF token"
    return found.group(1)


def cookie_value(response: Any) -> str:
    found = re.search(f"{SESSION_COOKIE}=([^;]+)", response.headers.get("set-cookie", ""))
    assert found, "the answer sets the session cookie"
    return found.group(1)


def _logged_in(client: TestClient) -> str:
    response = client.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return _csrf(client.get("/").text)


@pytest.fixture
def secured(page_controller: Make) -> tuple[Controller, TestClient]:
    controller, client = page_controller(api_tokens=[TOKEN])
    seed_run(controller.engine, "run-seeded", 6, template_prefix="tpl", message=XSS)
    return controller, client


def test_without_a_session_every_page_redirects_and_every_asset_is_401(
    secured: tuple[Controller, TestClient],
) -> None:
    _, client = secured
    for path in PAGES:
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 303, path
        assert response.headers["location"].startswith("/login?next=/"), path
    for path in ASSETS:
        assert client.get(path).status_code == 401, path
    login = client.get("/login")
    assert login.status_code == 200 and 'name="token"' in login.text
    client.cookies.set(SESSION_COOKIE, "forged")
    assert client.get("/static/app.css").status_code == 401
    client.cookies.clear()


def test_login_keeps_a_random_session_in_an_httponly_strict_cookie(
    secured: tuple[Controller, TestClient],
) -> None:
    _, client = secured
    wrong = client.post("/login", data={"token": "nope"}, follow_redirects=False)
    assert wrong.status_code == 401 and "not valid" in wrong.text
    assert SESSION_COOKIE not in wrong.headers.get("set-cookie", "")
    response = client.post(
        "/login", data={"token": TOKEN, "next": "//evil.example/x"}, follow_redirects=False
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/", "no redirect off this server"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    # Not served on loopback (TestClient's server is `testserver`): Secure, for the TLS
    # proxy in front; served on 127.0.0.1 it is not (tests/security/test_sessions.py).
    assert "Secure" in cookie
    value = cookie_value(response)
    assert TOKEN not in cookie and len(value) >= 43
    with TestClient(client.app, base_url="https://testserver") as other:
        again = other.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert cookie_value(again) != value, "random per login, not derived from the token"
    for path in PAGES:
        assert client.get(path).status_code == 200, path
    assert client.get("/static/run.js").headers["content-type"].startswith("text/javascript")


def test_cross_site_posts_are_refused(secured: tuple[Controller, TestClient]) -> None:
    _, client = secured
    csrf = _logged_in(client)
    cancel = "/v1/runs/run-seeded/cancel"
    refused = [
        {},  # the cookie alone
        {"X-CSRF-Token": "0" * 64},
        {"X-CSRF-Token": csrf, "Origin": "http://evil.example"},
        {"X-CSRF-Token": csrf, "Sec-Fetch-Site": "cross-site"},
        {"X-CSRF-Token": csrf, "Origin": "null"},
    ]
    for headers in refused:
        response = client.post(cancel, headers=headers)
        assert response.status_code == 403, headers
        assert response.json()["error"]["code"] == "cross_site_request"
    assert client.get("/v1/runs/run-seeded").json()["cancel_requested"] is False
    same_site = {"X-CSRF-Token": csrf, "Origin": "http://testserver"}
    assert client.post(cancel, headers=same_site).status_code == 200
    assert client.get("/v1/runs/run-seeded").json()["cancel_requested"] is True


def test_without_tokens_a_cross_site_post_is_refused_too(page_controller: Make) -> None:
    controller, client = page_controller()
    seed_run(controller.engine, "run-open", 2)
    evil = client.post("/v1/runs/run-open/cancel", headers={"Origin": "http://evil.example"})
    assert evil.status_code == 403
    assert client.post("/v1/runs/run-open/cancel").status_code == 200  # a CLI sends no Origin
    assert client.get("/").status_code == 200  # no login without tokens


def test_pages_forbid_inline_script_and_carry_none(secured: tuple[Controller, TestClient]) -> None:
    _, client = secured
    _logged_in(client)
    for path in PAGES:
        response = client.get(path)
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        html = response.text
        parsed = _Parsed()
        parsed.feed(html)
        assert parsed.scripts and all(src.startswith("/static/") for src in parsed.scripts)
        assert parsed.inline_scripts == 0, path
        assert parsed.handlers == [], (path, parsed.handlers)
        assert parsed.styled == 0, "no inline style attribute (style-src 'self')"


def test_untrusted_strings_render_as_text(secured: tuple[Controller, TestClient]) -> None:
    _, client = secured
    _logged_in(client)
    escaped = "&lt;img src=x onerror=&#34;window.__xss=1&#34;&gt;&lt;script&gt;"
    for path in ["/runs/run-seeded", "/sandboxes/seeded-tpl-0002", "/new"]:
        html = client.get(path).text
        assert "<img src=x" not in html and "<script>window" not in html, path
    run_html = client.get("/runs/run-seeded").text
    assert escaped in run_html, "the failed sandbox's error and the error event, as text"
    assert escaped in client.get("/new").text, "the template description, as text"


def test_a_run_page_of_1000_sandboxes_renders_every_row(page_controller: Make) -> None:
    """Its speed is measured by bench/dashboard_bench.py, not asserted here."""
    controller, client = page_controller()
    ids = seed_run(controller.engine, "run-big", 1000)
    response = client.get("/runs/run-big")
    assert response.status_code == 200
    html = response.text
    assert html.count('<tr id="sb-') == 1000
    assert all(f'id="sb-{i}"' in html for i in ids[::97])
    bars = re.findall(r'<rect class="bar b-([a-z]+)', html)
    assert bars.count("retried") > 100, "earlier attempts of retried sandboxes are drawn"


def test_runs_list_filters_pages_and_counts(page_controller: Make) -> None:
    controller, client = page_controller()
    for n in range(30):
        seed_run(
            controller.engine, f"run-list-{n:02d}", 3, status="succeeded" if n % 2 else "running"
        )
    first = client.get("/").text
    assert first.count("<tr data-run=") == 25 and 'rel="next"' in first
    second = client.get("/?page=2").text
    assert second.count("<tr data-run=") == 5 and 'rel="prev"' in second
    ok = client.get("/?status=succeeded").text
    assert ok.count("<tr data-run=") == 15 and "s-running" not in ok
    assert ">3/3<" in ok, "done/total per run"
    assert client.get("/?status=bogus").status_code == 422


def test_unknown_run_and_sandbox_pages_are_404(page_controller: Make) -> None:
    _, client = page_controller()
    assert client.get("/runs/run-nope").status_code == 404
    assert client.get("/sandboxes/nope").status_code == 404
    assert client.get("/static/nope.js").status_code == 404


def test_the_report_fragment_matches_the_api(page_controller: Make) -> None:
    controller, client = page_controller()
    seed_run(controller.engine, "run-done", 4, status="succeeded")
    report: dict[str, Any] = client.get("/v1/runs/run-done/report").json()
    html = client.get("/runs/run-done").text
    assert 'id="report-title"' in html and 'id="downloads" class="downloads">' in html
    fragment = client.get("/runs/run-done/report-fragment").text
    succeeded = report["totals"]["succeeded"]
    assert f'data-total="succeeded">{succeeded}/4<' in fragment
    assert fragment.count('class="cov-label"') == 17


def test_a_staged_run_groups_its_rows_by_stage(page_controller: Make) -> None:
    from sqlalchemy import update

    from controller.db.schema import runs, sandboxes

    controller, client = page_controller()
    ids = seed_run(controller.engine, "run-staged", 6)
    stages = [
        {"index": 0, "templates": [], "policy": {"quorum": 3}},
        {"index": 1, "templates": [], "policy": "all"},
    ]
    with controller.engine.begin() as conn:
        plan = dict(conn.execute(runs.select()).one().plan)
        plan["stages"] = stages
        conn.execute(update(runs).values(plan=plan, stage=1))
        for n, sandbox_id in enumerate(ids):
            conn.execute(update(sandboxes).where(sandboxes.c.id == sandbox_id).values(stage=n // 4))
    html = client.get("/runs/run-staged").text
    heads = re.findall(r'<tr class="stage-row"><th colspan="8" scope="rowgroup">([^<]*)</th>', html)
    assert heads == ["Stage 1 of 2 · policy quorum 3", "Stage 2 of 2 · policy all"]
    assert html.index(heads[1]) > html.index(f'id="sb-{ids[3]}"')
    assert html.index(heads[1]) < html.index(f'id="sb-{ids[4]}"')
    assert 'stage <span id="run-stage">2</span> of 2' in html


def test_no_page_loads_a_script_from_another_site(secured: tuple[Controller, TestClient]) -> None:
    """Issue 25, finding 11: FastAPI's /docs and /redoc loaded swagger-ui and redoc from a
    CDN, unpinned, on the dashboard's origin. They are not served; the schema is."""
    _, client = secured
    _logged_in(client)
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert client.get(path).status_code == 404, path
    schema = client.get("/openapi.json")
    assert schema.status_code == 200 and schema.json()["openapi"].startswith("3.")
    for path in PAGES:
        parsed = _Parsed()
        parsed.feed(client.get(path).text)
        assert all(src.startswith("/static/") for src in parsed.scripts), (path, parsed.scripts)
