"""The OpenAPI schema the served controller publishes, checked by schemathesis.

The schema documents every model and error; `st run` (every check, every phase) finds
no 5xx and no response off the schema. What schemathesis once found in the server
has a regression test of its own below.

The seed is fixed so CI is repeatable; SIMPLE_TEST_SCHEMATHESIS_SEED=<n> explores others.
schemathesis is pinned to 4.32.5 (a dev dependency); without it this fails in CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx

from tests.ci.conftest import Served, ServeFactory
from tests.conftest import require_service

SCHEMATHESIS = "4.32.5"
ERROR_REF = "#/components/schemas/ErrorResponse"
SEED = os.environ.get("SIMPLE_TEST_SCHEMATHESIS_SEED", "20261121")
MAX_EXAMPLES = 25
ST_TIMEOUT_S = 150

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


def _schema(served: Served) -> dict[str, Any]:
    response = httpx.get(f"{served.url}/openapi.json", timeout=10)
    assert response.status_code == 200
    return dict(response.json())


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]


def test_the_schema_documents_every_model_and_error(served: Served) -> None:
    schema = _schema(served)
    components = schema["components"]["schemas"]
    assert "HTTPValidationError" not in components, "422s are ErrorResponse, not FastAPI's"
    for method, path, operation in _operations(schema):
        where = f"{method} {path}"
        responses = operation["responses"]
        errors = {code: r for code, r in responses.items() if code[0] in "45"}
        for code, response in errors.items():
            assert response["content"] == {"application/json": {"schema": {"$ref": ERROR_REF}}}, (
                where, code
            )
            assert response["description"], (where, code)
        if path.startswith("/v1/"):
            assert any(code.startswith("4") for code in errors), f"{where}: no 4xx documented"
            assert "422" in errors, f"{where}: validation errors are not documented"
        for code, response in responses.items():
            if code.startswith("2"):
                content = response.get("content", {})
                assert content, f"{where} {code}: no content documented"
                json_schema = content.get("application/json", {}).get("schema")
                if json_schema is not None:
                    ref = json_schema.get("$ref", "")
                    assert ref.removeprefix("#/components/schemas/") in components, (
                        f"{where} {code}: the JSON answer is not a named model: {json_schema}"
                    )
        if "requestBody" in operation:
            assert operation["requestBody"]["content"], where
    stream = schema["paths"]["/v1/runs/{run_id}/stream"]["get"]["responses"]["200"]
    assert "text/event-stream" in stream["content"]
    report = schema["paths"]["/v1/runs/{run_id}/report"]["get"]["responses"]["200"]
    assert {"application/json", "application/xml", "text/markdown"} <= set(report["content"])


def _finished_run(served: Served) -> dict[str, Any]:
    with served.client() as http:
        response = http.post("/v1/runs", json={"names": ["ci-mixed"]})
    assert response.status_code == 201, response.text
    return served.wait_run(response.json()["run_id"])


def _config(served: Served, run: dict[str, Any]) -> str:
    """schemathesis.toml: the token, real ids to reach past 404s, and what is excepted (why)."""
    sandboxes = ", ".join(f'"{s["sandbox_id"]}"' for s in run["sandboxes"])
    return textwrap.dedent(f"""
        [auth.openapi.apiToken]
        bearer = "{served.token}"

        [generation]
        allow-x00 = true

        # Real ids half of the time, so the read routes get past 404; names of the ci
        # catalog's fast templates now and then, so some generated runs really start.
        [dictionaries.runs]
        values = ["{run["run_id"]}"]
        [dictionaries.sandboxes]
        values = [{sandboxes}]
        [dictionaries.names]
        values = ["ci_ok", "ci-ok"]

        [parameters]
        "path.run_id" = {{ dictionary = "runs", probability = 0.5 }}
        "path.sandbox_id" = {{ dictionary = "sandboxes", probability = 0.5 }}
        "body.names[*]" = {{ dictionary = "names", probability = 0.3 }}

        # Suites, templates and categories are catalog data, which no schema can list: a
        # schema-valid request naming one the catalog lacks (or naming none) is 422
        # `unknown_name` / `invalid_input` by contract (the CLI's exit 2), not a bug.
        [[operations]]
        include-name = ["GET /v1/templates", "POST /v1/plans", "POST /v1/runs"]
        checks.positive_data_acceptance.expected-statuses = ["2xx", 401, 403, 404, 409, 422]

        """)


def test_schemathesis_finds_no_5xx_and_no_response_off_the_schema(
    serve: ServeFactory, ci_catalog: Path, tmp_path: Path
) -> None:
    try:
        import schemathesis
    except ImportError:
        require_service("schemathesis", f"pip install schemathesis=={SCHEMATHESIS}")
    assert schemathesis.__version__ == SCHEMATHESIS, "the version the docs and CI pin"
    # Only the fast `ci` templates exist, so whatever a generated request starts ends soon.
    served = serve(SIMPLE_BUILTIN_CATALOG_DIR=str(ci_catalog))
    config = tmp_path / "schemathesis.toml"
    config.write_text(_config(served, _finished_run(served)))
    # Every check and every phase is on by default (`--checks all` on the command line
    # would override the per-operation settings above). One worker: hypothesis parses
    # lambdas with `ast`, which CPython 3.11 does not do safely from two threads at once.
    result = subprocess.run(
        [
            sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "--no-color",
            "run", f"{served.url}/openapi.json",
            "--max-examples", str(MAX_EXAMPLES),
            "--seed", SEED,
            "--generation-database", "none",
            "--request-timeout", "20",
            "--workers", "1",
        ],
        capture_output=True,
        text=True,
        timeout=ST_TIMEOUT_S,
        cwd=tmp_path,
        env=served.cli_env,
    )
    output = result.stdout + result.stderr
    failures = output[output.find("= FAILURES ="):] if "= FAILURES =" in output else output
    assert result.returncode == 0, failures[-12000:]
    # Every operation the schema has was tested (counted from the schema, so a new route
    # does not need this line changed).
    spec = httpx.get(f"{served.url}/openapi.json", timeout=10).json()
    n = sum(1 for ops in spec["paths"].values() for op in ops if op in HTTP_METHODS)
    assert n >= 15
    assert f"{n} selected / {n} total" in output or f"Selected: {n}/{n}" in output, output[-3000:]


# --- What schemathesis found once, kept as regression tests ----------------------------


def test_snapshot_upload_with_a_non_ascii_signature_is_refused_not_a_500(served: Served) -> None:
    sandbox_id = _finished_run(served)["sandboxes"][0]["sandbox_id"]
    response = httpx.put(
        f"{served.url}/v1/sandboxes/{sandbox_id}/snapshot",
        params={"attempt": 1, "signature": "é" * 64},
        content=b"x",
        timeout=10,
    )
    assert response.status_code in (401, 422), response.text


def test_405_names_every_method_of_the_path(served: Served) -> None:
    response = httpx.request("OPTIONS", f"{served.url}/v1/runs", headers=served.headers)
    assert response.status_code == 405
    assert {m.strip() for m in response.headers["allow"].split(",")} == {"GET", "POST"}


NUL_REQUESTS = [
    ("GET", "/v1/runs?status=%00"),
    ("GET", "/v1/runs/run-%00"),
    ("POST", "/v1/runs/run-%00/cancel"),
    ("GET", "/v1/runs/run-%00/report"),
    ("GET", "/v1/runs/run-%00/stream"),
    ("GET", "/v1/sandboxes/a%00b"),
    ("GET", "/v1/sandboxes/a%00b/logs"),
    ("PUT", "/v1/sandboxes/a%00b/snapshot?attempt=1&signature=" + "0" * 64),
]


def test_nul_in_an_id_or_a_filter_is_no_500(served: Served) -> None:
    answers = {
        f"{method} {path}": httpx.request(
            method, served.url + path, headers=served.headers, timeout=10
        ).status_code
        for method, path in NUL_REQUESTS
    }
    assert all(code < 500 for code in answers.values()), answers
