"""The HTTP API of a real controller, served on a free 127.0.0.1 port, driven with httpx.

Runs use a tiny custom catalog (two agents, two steps) on the embedded default: the
process backend launching the real built-in runtime, `python -m sandbox_image`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import httpx
import pytest

from controller.catalog.templates import Catalog, load_catalog
from controller.cli.embedded import EmbeddedServer
from controller.settings import Settings

TINY_CATALOG = """
templates:
  - id: tiny
    category: tiny-tests
    description: two agents, two steps
    mechanisms: [M2, M10]
    tags: [tiny, smoke]
    estimate: {cost_usd: [0.1, 0.5], runtime_s: [1, 5]}
    timeout_s: 120
    resources: {cpu: 500m, memory: 512Mi}
    config: {agents: 2, steps: 2}
  - id: tiny_fail
    category: tiny-tests
    description: fails at its first step, not transiently
    mechanisms: [M4]
    tags: [tiny]
    estimate: {cost_usd: [0.1, 0.5], runtime_s: [1, 5]}
    timeout_s: 120
    config: {agents: 2, steps: 2, fail_at_step: 1}
suites:
  tiny-pair: [tiny, tiny_fail]
"""
ERROR_KEYS = {"code", "message", "hint", "field"}
ACTIVE = {"pending", "running"}


def assert_error(response: httpx.Response, status: int, code: str | None = None,
                 field: str | None = None) -> dict[str, Any]:
    """Every error is JSON {"error": {"code", "message", "hint", "field"}}."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == ERROR_KEYS
    assert error["code"] and error["message"]
    if code is not None:
        assert error["code"] == code
    if field is not None:
        assert error["field"] == field
    return error


def wait_for_run(client: httpx.Client, run_id: str, timeout_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run = client.get(f"/v1/runs/{run_id}").raise_for_status().json()
        if run["status"] not in ACTIVE:
            return run
        assert time.monotonic() < deadline, f"run {run_id} still {run['status']}: {run}"
        time.sleep(0.1)


@contextmanager
def serve(settings: Settings, **update: Any) -> Iterator[EmbeddedServer]:
    """Serve `settings` (updated); at the end, cancel what still runs and wait for it."""
    with EmbeddedServer(settings.model_copy(update=update)) as server:
        try:
            yield server
        finally:
            _cancel_active(server.url, update.get("api_tokens"))


def _cancel_active(url: str, tokens: list[str] | None) -> None:
    headers = {"Authorization": f"Bearer {tokens[0]}"} if tokens else {}
    with httpx.Client(base_url=url, timeout=10, headers=headers) as client:
        for run in client.get("/v1/runs").json().get("runs", []):
            if run["status"] in ACTIVE:
                client.post(f"/v1/runs/{run['run_id']}/cancel")
                wait_for_run(client, run["run_id"], timeout_s=15)


@pytest.fixture
def tiny_dir(catalog_dir: Callable[[str], Path]) -> Path:
    return catalog_dir(TINY_CATALOG)


@pytest.fixture
def server(settings: Settings, tiny_dir: Path) -> Iterator[EmbeddedServer]:
    """A fresh controller (on the `settings` fixture's database) for tests that start runs."""
    with serve(settings, catalog_dirs=[tiny_dir], max_attempts=1) as server:
        yield server


@pytest.fixture
def client(server: EmbeddedServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client


@contextmanager
def shared_server(root: Path, **update: Any) -> Iterator[EmbeddedServer]:
    """A controller on its own SQLite file, shared by a module's tests that create nothing."""
    (root / "catalog").mkdir()
    (root / "catalog" / "tiny.yaml").write_text(TINY_CATALOG)
    settings = Settings(data_dir=root / "data", database_url=f"sqlite:///{root / 'simple.db'}",
                        reconcile_interval_s=0.2)
    with serve(settings, catalog_dirs=[root / "catalog"], max_attempts=1, **update) as server:
        yield server


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    with shared_server(tmp_path_factory.mktemp("shared")) as server:
        yield server


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """A shared controller with SIMPLE_API_TOKENS=t1."""
    with shared_server(tmp_path_factory.mktemp("secured"), api_tokens=["t1"]) as server:
        yield server


@pytest.fixture
def api(shared: EmbeddedServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=shared.url, timeout=10) as client:
        yield client


@pytest.fixture(scope="module")
def catalog(shared: EmbeddedServer) -> Catalog:
    """The served catalog, loaded independently of the server."""
    return load_catalog([shared.settings.builtin_catalog_dir, *shared.settings.catalog_dirs])


def start_run(client: httpx.Client, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    response = client.post("/v1/runs", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


# --- health ----------------------------------------------------------------------------


def test_healthz_and_readyz(api: httpx.Client) -> None:
    assert api.get("/healthz").json()["status"] == "ok"
    ready = api.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"


def test_server_listens_on_loopback_only(shared: EmbeddedServer) -> None:
    assert shared.url.startswith("http://127.0.0.1:")
    assert shared.sock.getsockname()[0] == "127.0.0.1"


# --- templates -------------------------------------------------------------------------


def test_templates_lists_the_whole_catalog(api: httpx.Client, catalog: Catalog) -> None:
    body = api.get("/v1/templates").raise_for_status().json()
    assert body["count"] == len(body["templates"]) == 66
    assert [t["id"] for t in body["templates"]] == list(catalog.templates)
    assert body["suites"]["tiny-pair"] == ["tiny", "tiny_fail"]
    assert len(body["suites"]["ultra"]) == 64
    tiny = next(t for t in body["templates"] if t["id"] == "tiny")
    assert tiny["estimate"] == {"cost_usd": [0.1, 0.5], "runtime_s": [1.0, 5.0]}
    assert tiny["resources"] == {"cpu": "500m", "memory": "512Mi"}
    assert tiny["config"] == {"agents": 2, "steps": 2}


@pytest.mark.parametrize("params", [
    {"suite": "quick"}, {"suite": "portal"}, {"suite": "tiny-pair"}, {"category": "corporate"},
    {"category": "tiny-tests"}, {"tag": "portal"}, {"tag": "smoke"},
    {"suite": "ultra", "category": "full"}, {"suite": "portal", "tag": "standard"},
])
def test_templates_filters(api: httpx.Client, catalog: Catalog, params) -> None:
    body = api.get("/v1/templates", params=params).raise_for_status().json()
    members = set(catalog.suite(params["suite"])) if "suite" in params else None
    expected = [
        t.id for t in catalog.templates.values()
        if (members is None or t.id in members)
        and t.category == params.get("category", t.category)
        and ("tag" not in params or params["tag"] in t.tags)
    ]
    assert expected, "a filter in this test should match something"
    assert [t["id"] for t in body["templates"]] == expected
    assert body["count"] == len(expected)


def test_templates_unknown_suite(api: httpx.Client) -> None:
    error = assert_error(api.get("/v1/templates", params={"suite": "nope"}), 422,
                         "unknown_name")
    assert "nope" in error["message"]
    assert "quick" in error["hint"]


def test_templates_unknown_suite_names_the_query_parameter(api: httpx.Client) -> None:
    assert_error(api.get("/v1/templates", params={"suite": "nope"}), 422, field="suite")


# --- plans -----------------------------------------------------------------------------


def test_plan_shape(api: httpx.Client, catalog: Catalog) -> None:
    body = {"suites": ["quick", "full"], "budget_usd": 40, "priority": "cost"}
    plan = api.post("/v1/plans", json=body).raise_for_status().json()
    assert {"selected", "excluded", "estimated_cost_usd", "max_parallel",
            "estimated_runtime_s"} <= set(plan)
    wanted = {*catalog.suite("quick"), *catalog.suite("full")}
    excluded = [e["template_id"] for e in plan["excluded"]]
    assert sorted([*plan["selected"], *excluded]) == sorted(wanted)
    assert excluded, "a $40 budget cannot hold quick and full"
    assert all("$40.00 budget" in e["reason"] for e in plan["excluded"])
    low, high = plan["estimated_cost_usd"]
    selected = [catalog.templates[t] for t in plan["selected"]]
    assert low == pytest.approx(sum(t.cost_usd[0] for t in selected))
    assert high == pytest.approx(sum(t.cost_usd[1] for t in selected))
    assert high <= 40
    assert plan["max_parallel"] == 2
    assert len(plan["estimated_runtime_s"]) == 2
    assert 0 < plan["estimated_runtime_s"][0] <= plan["estimated_runtime_s"][1]


def test_plan_does_not_create_a_run(api: httpx.Client) -> None:
    api.post("/v1/plans", json={"suites": ["quick"]}).raise_for_status()
    assert api.get("/v1/runs").json()["runs"] == []


def test_plan_from_free_text(api: httpx.Client, catalog: Catalog) -> None:
    body = {"query": "run all portal templates under $50, fast"}
    plan = api.post("/v1/plans", json=body).raise_for_status().json()
    assert plan["budget_usd"] == 50
    assert plan["priority"] == "speed"
    considered = [*plan["selected"], *(e["template_id"] for e in plan["excluded"])]
    assert sorted(considered) == sorted(catalog.suite("portal"))
    assert plan["estimated_cost_usd"][1] <= 50


@pytest.mark.parametrize(("body", "code", "field", "named"), [
    ({"names": ["quick", "no_such_thing"]}, "unknown_name", "names", "no_such_thing"),
    ({"suites": ["no-such-suite"]}, "unknown_name", "suites", "no-such-suite"),
    ({"templates": ["no_such_template"]}, "unknown_name", "templates", "no_such_template"),
    ({"categories": ["no-such-category"]}, "invalid_input", "categories", "no-such-category"),
    ({"suites": ["quick"], "priority": "fastest"}, "invalid_input", "priority", "priority"),
    ({"suites": ["quick"], "budget_usd": -5}, "invalid_input", "budget_usd", "budget_usd"),
    ({"suites": ["quick"], "budget_usd": 0}, "invalid_input", "budget_usd", "budget_usd"),
    ({"suites": ["quick"], "max_parallel": 0}, "invalid_input", "max_parallel", "max_parallel"),
    ({"suites": ["quick"], "colour": "blue"}, "invalid_input", "colour", "colour"),
    ({"suites": "quick"}, "invalid_input", "suites", "suites"),
    ({}, "invalid_input", "suites", "nothing to run"),
])
@pytest.mark.parametrize("path", ["/v1/plans", "/v1/runs"])
def test_bad_requests_are_422_naming_the_field(api: httpx.Client, path: str, body, code,
                                               field, named) -> None:
    error = assert_error(api.post(path, json=body), 422, code, field)
    assert named in error["message"]
    assert error["hint"]


def test_bad_requests_create_no_run(api: httpx.Client) -> None:
    assert_error(api.post("/v1/runs", json={"suites": ["nope"]}), 422)
    assert api.get("/v1/runs").json()["runs"] == []


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/v1/runs/run-nope", 404, "not_found"),
    ("GET", "/v1/runs/run-nope/report", 404, "not_found"),
    ("POST", "/v1/runs/run-nope/cancel", 404, "not_found"),
    ("GET", "/v1/sandboxes/nope-tiny", 404, "not_found"),
    ("GET", "/v1/sandboxes/nope-tiny/logs", 404, "not_found"),
    ("GET", "/v1/no-such-route", 404, None),
    ("DELETE", "/v1/runs", 405, None),
    ("GET", "/v1/runs/run-nope/report?format=pdf", 422, "invalid_input"),
    ("GET", "/v1/runs?limit=0", 422, "invalid_input"),
])
def test_errors_are_json(api: httpx.Client, method: str, path: str, status: int,
                         code: str | None) -> None:
    error = assert_error(api.request(method, path), status, code)
    if status == 404 and code:
        assert "nope" in error["message"]
        assert error["hint"]


def test_malformed_json_body_is_a_json_error(api: httpx.Client) -> None:
    response = api.post("/v1/plans", content=b"{not json",
                        headers={"Content-Type": "application/json"})
    assert_error(response, 422, "invalid_input")


# --- runs ------------------------------------------------------------------------------


def test_run_reaches_succeeded_and_is_listed(client: httpx.Client) -> None:
    created = start_run(client, {"templates": ["tiny"]})
    run_id = created["run_id"]
    assert created["status"] in ACTIVE
    assert [s["template_id"] for s in created["sandboxes"]] == ["tiny"]
    assert created["plan"]["selected"] == ["tiny"]

    run = wait_for_run(client, run_id)
    assert run["status"] == "succeeded", run
    [sandbox] = run["sandboxes"]
    assert sandbox["status"] == "succeeded"
    assert (sandbox["exit_code"], sandbox["attempts"]) == (0, 1)
    assert (sandbox["step"], sandbox["steps_total"]) == (2, 2)
    assert sandbox["aggregated"] is True
    assert sandbox["cost_usd"] > 0
    assert run["finished_at"] is not None

    listed = client.get("/v1/runs").raise_for_status().json()["runs"]
    assert [r["run_id"] for r in listed] == [run_id]
    assert listed[0]["status"] == "succeeded"
    assert [r["run_id"] for r in client.get("/v1/runs", params={"status": "succeeded"})
            .json()["runs"]] == [run_id]
    assert client.get("/v1/runs", params={"status": "failed"}).json()["runs"] == []


def test_runs_are_listed_newest_first(client: httpx.Client) -> None:
    first = start_run(client, {"templates": ["tiny"]})["run_id"]
    second = start_run(client, {"templates": ["tiny"], "seed": 7})["run_id"]
    assert first != second
    listed = [r["run_id"] for r in client.get("/v1/runs").json()["runs"]]
    assert listed == [second, first]
    assert [r["run_id"] for r in client.get("/v1/runs", params={"limit": 1})
            .json()["runs"]] == [second]
    for run_id in (first, second):
        wait_for_run(client, run_id)


def test_report_in_three_formats(client: httpx.Client) -> None:
    run_id = start_run(client, {"templates": ["tiny"]})["run_id"]
    run = wait_for_run(client, run_id)
    [sandbox] = run["sandboxes"]

    report = client.get(f"/v1/runs/{run_id}/report").raise_for_status().json()
    assert (report["run_id"], report["status"]) == (run_id, "succeeded")
    totals = report["totals"]
    assert (totals["sandboxes"], totals["succeeded"], totals["failed"]) == (1, 1, 0)
    assert totals["cost_usd"] > 0 and totals["tokens_used"] > 0 and totals["llm_calls"] > 0
    # The snapshot's cost (report) agrees with the cost the events reported (sandbox row).
    assert totals["cost_usd"] == pytest.approx(sandbox["cost_usd"], abs=1e-3)
    assert totals["mechanisms_covered"] == ["M2", "M10"]
    assert totals["mechanism_coverage_pct"] == round(100 * 2 / 17, 1)
    [row] = report["sandboxes"]
    assert row["sandbox_id"] == sandbox["sandbox_id"]
    assert row["cost_usd"] == totals["cost_usd"]
    assert row["error"] is None
    assert row["duration_s"] > 0

    junit = client.get(f"/v1/runs/{run_id}/report", params={"format": "junit"})
    assert junit.status_code == 200
    assert "xml" in junit.headers["content-type"]
    root = ET.fromstring(junit.text)
    [case] = root.iter("testcase")
    assert case.get("name") == "tiny"
    assert case.find("failure") is None
    props = {p.get("name"): p.get("value") for p in case.find("properties")}
    assert props["sandbox_id"] == sandbox["sandbox_id"]
    assert float(props["cost_usd"]) == row["cost_usd"]

    markdown = client.get(f"/v1/runs/{run_id}/report", params={"format": "markdown"})
    assert markdown.status_code == 200
    assert markdown.headers["content-type"].startswith("text/markdown")
    rows = [line for line in markdown.text.splitlines() if line.startswith("| tiny |")]
    assert len(rows) == 1
    assert "succeeded" in rows[0]
    assert run_id in markdown.text


def test_failed_sandbox_is_reported(client: httpx.Client) -> None:
    run_id = start_run(client, {"suites": ["tiny-pair"]})["run_id"]
    run = wait_for_run(client, run_id)
    assert run["status"] == "failed"
    statuses = {s["template_id"]: s for s in run["sandboxes"]}
    failed = statuses["tiny_fail"]
    assert statuses["tiny"]["status"] == "succeeded"
    assert failed["status"] == "failed"
    assert failed["exit_code"] not in (0, None)
    assert failed["attempts"] == 1  # the server allows one attempt
    assert failed["error"]

    report = client.get(f"/v1/runs/{run_id}/report").json()
    assert (report["totals"]["succeeded"], report["totals"]["failed"]) == (1, 1)
    root = ET.fromstring(client.get(f"/v1/runs/{run_id}/report",
                                    params={"format": "junit"}).text)
    cases = {c.get("name"): c for c in root.iter("testcase")}
    failure = cases["tiny_fail"].find("failure")
    assert failure is not None
    assert f"exit code {failed['exit_code']}" in (failure.text or "")
    assert failed["error"].splitlines()[0] in (failure.text or "")
    assert cases["tiny"].find("failure") is None


def test_idempotency_key(client: httpx.Client) -> None:
    key = f"ci-{uuid.uuid4().hex}"
    body = {"templates": ["tiny"], "budget_usd": 5}
    first = start_run(client, body, **{"Idempotency-Key": key})
    again = client.post("/v1/runs", json=body, headers={"Idempotency-Key": key})
    assert again.status_code == 200
    assert again.json()["run_id"] == first["run_id"]

    other = client.post("/v1/runs", json={"templates": ["tiny"], "budget_usd": 6},
                        headers={"Idempotency-Key": key})
    error = assert_error(other, 409, "conflict")
    assert key in error["message"]
    assert error["hint"]

    without_key = start_run(client, body)
    assert without_key["run_id"] != first["run_id"]
    listed = [r["run_id"] for r in client.get("/v1/runs").json()["runs"]]
    assert sorted(listed) == sorted([first["run_id"], without_key["run_id"]])
    for run_id in listed:
        assert wait_for_run(client, run_id)["status"] == "succeeded"
    replay = client.post("/v1/runs", json=body, headers={"Idempotency-Key": key})
    assert replay.status_code == 200
    assert replay.json()["status"] == "succeeded"


def test_run_whose_budget_excludes_everything(client: httpx.Client) -> None:
    before = client.get("/v1/runs").json()["runs"]
    response = client.post("/v1/runs", json={"templates": ["tiny"], "budget_usd": 0.05})
    error = assert_error(response, 422, "invalid_input", field="budget_usd")
    assert error["message"].startswith("nothing would run: the budget excludes every template")
    assert "tiny: over budget" in error["message"] and "budget_usd" in error["hint"]
    assert client.get("/v1/runs").json()["runs"] == before, "no run was created"


# --- sandboxes -------------------------------------------------------------------------


def test_sandbox_detail_and_archived_logs(client: httpx.Client, server: EmbeddedServer) -> None:
    run_id = start_run(client, {"templates": ["tiny"]})["run_id"]
    run = wait_for_run(client, run_id)
    sandbox_id = run["sandboxes"][0]["sandbox_id"]

    detail = client.get(f"/v1/sandboxes/{sandbox_id}").raise_for_status().json()
    assert (detail["sandbox_id"], detail["run_id"], detail["template_id"]) == (
        sandbox_id, run_id, "tiny")
    [attempt] = detail["attempt_history"]
    assert (attempt["attempt"], attempt["status"], attempt["exit_code"]) == (1, "succeeded", 0)
    started = datetime.fromisoformat(attempt["started_at"])
    finished = datetime.fromisoformat(attempt["finished_at"])
    assert started <= finished <= datetime.now(UTC)
    assert attempt["cost_usd"] == pytest.approx(detail["cost_usd"])

    # The sandbox's own directory is gone; the log is served from the archive.
    assert not (server.settings.data_dir / "sandboxes" / sandbox_id).exists()
    logs = client.get(f"/v1/sandboxes/{sandbox_id}/logs")
    assert logs.status_code == 200
    assert logs.headers["content-type"].startswith("text/plain")
    assert f"sandbox {sandbox_id} started" in logs.text
    assert "exiting with code 0" in logs.text


def test_retried_sandbox_shows_every_attempt(settings: Settings, tiny_dir: Path) -> None:
    flaky = tiny_dir / "flaky.yaml"
    flaky.write_text("""
templates:
  - id: flaky
    category: tiny-tests
    estimate: {cost_usd: [0.1, 0.5], runtime_s: [1, 5]}
    config: {agents: 2, steps: 2, fail_attempts: 1}
""")
    with (serve(settings, catalog_dirs=[tiny_dir], max_attempts=3) as server,
          httpx.Client(base_url=server.url, timeout=10) as client):
        run = wait_for_run(client, start_run(client, {"templates": ["flaky"]})["run_id"])
        assert run["status"] == "succeeded"
        sandbox = client.get(f"/v1/sandboxes/{run['sandboxes'][0]['sandbox_id']}").json()
    history = sandbox["attempt_history"]
    assert [a["attempt"] for a in history] == [1, 2]
    assert [a["status"] for a in history] == ["failed", "succeeded"]
    assert history[0]["exit_code"] != 0
    assert sandbox["attempts"] == 2


# --- API tokens ------------------------------------------------------------------------


@pytest.fixture
def secured_server(settings: Settings, tiny_dir: Path) -> Iterator[EmbeddedServer]:
    with serve(settings, catalog_dirs=[tiny_dir], max_attempts=1, api_tokens=["t1"]) as server:
        yield server


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/templates"), ("POST", "/v1/plans"), ("POST", "/v1/runs"),
    ("GET", "/v1/runs"), ("GET", "/v1/runs/run-x"), ("GET", "/v1/runs/run-x/report"),
    ("POST", "/v1/runs/run-x/cancel"), ("GET", "/v1/sandboxes/x-tiny"),
    ("GET", "/v1/sandboxes/x-tiny/logs"),
])
def test_v1_routes_need_a_token(secured: EmbeddedServer, method: str, path: str) -> None:
    body = {"templates": ["tiny"]} if method == "POST" else None
    with httpx.Client(base_url=secured.url, timeout=10) as client:
        missing = client.request(method, path, json=body)
        error = assert_error(missing, 401, "unauthorized")
        assert "Bearer" in error["hint"]
        assert missing.headers.get("www-authenticate") == "Bearer"
        for wrong in ("Bearer t2", "Bearer t1x", "Basic t1", "t1"):
            assert_error(client.request(method, path, json=body,
                                        headers={"Authorization": wrong}), 401, "unauthorized")
    with httpx.Client(base_url=secured.url, headers={"Authorization": "Bearer t1"}) as client:
        assert client.get("/v1/runs").json()["runs"] == []  # nothing above created a run


def test_health_needs_no_token(secured: EmbeddedServer) -> None:
    with httpx.Client(base_url=secured.url, timeout=10) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200


def test_the_right_token_works_and_sandboxes_need_none(secured_server: EmbeddedServer) -> None:
    headers = {"Authorization": "Bearer t1"}
    with httpx.Client(base_url=secured_server.url, timeout=10, headers=headers) as client:
        assert client.get("/v1/templates").status_code == 200
        assert client.post("/v1/plans", json={"suites": ["quick"]}).status_code == 200
        run_id = start_run(client, {"templates": ["tiny"]})["run_id"]
        # The sandbox reports with its own token only: the run still completes.
        run = wait_for_run(client, run_id)
        assert run["status"] == "succeeded"
        assert run["sandboxes"][0]["aggregated"] is True
        report = client.get(f"/v1/runs/{run_id}/report").json()
        assert report["totals"]["cost_usd"] > 0


def event_batch() -> dict[str, Any]:
    return {"events": [{"id": uuid.uuid4().hex, "seq": 1, "type": "progress",
                        "time": datetime.now(UTC).isoformat(), "data": {"step": 1}}]}


def test_sandbox_events_do_not_take_api_tokens(secured_server: EmbeddedServer) -> None:
    api = {"Authorization": "Bearer t1"}
    with (httpx.Client(base_url=secured_server.url, timeout=10) as client,
          httpx.Client(base_url=secured_server.url, timeout=10, headers=api) as authorized):
        run = start_run(authorized, {"templates": ["tiny"]})
        sandbox_id = run["sandboxes"][0]["sandbox_id"]
        path = f"/v1/sandboxes/{sandbox_id}/events"
        error = assert_error(client.post(path, json=event_batch()), 401, "unauthorized")
        assert error["hint"]
        assert_error(client.post(path, json=event_batch(), headers=api), 401, "unauthorized")
        assert_error(client.post("/v1/sandboxes/nope-tiny/events", json=event_batch(),
                                 headers=api), 401, "unauthorized")
        # The sandbox's own token still works: our refused posts did not disturb it.
        assert wait_for_run(authorized, run["run_id"])["status"] == "succeeded"
