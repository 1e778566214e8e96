"""Helpers for end-to-end tests against a served controller."""

from __future__ import annotations

import time
from typing import Any

import httpx

FINAL = {"succeeded", "failed", "cancelled", "budget_exceeded"}


def start_run(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> str:
    response = httpx.post(f"{url}/v1/runs", json=body, headers=headers or {}, timeout=30)
    assert response.status_code == 201, response.text
    return str(response.json()["run_id"])


def wait_run(
    url: str, run_id: str, timeout_s: float = 60, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(headers=headers or {}, timeout=30) as client:  # one connection
        while time.monotonic() < deadline:
            run = client.get(f"{url}/v1/runs/{run_id}").json()
            if run["status"] in FINAL:
                return dict(run)
            time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not end within {timeout_s} s: {run}")


def wait_for(predicate: Any, timeout_s: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def report(url: str, run_id: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/v1/runs/{run_id}/report", timeout=30).json())


def logs(url: str, sandbox_id: str) -> str:
    return httpx.get(f"{url}/v1/sandboxes/{sandbox_id}/logs", timeout=30).text


def cancel_active_runs(client: httpx.Client, timeout_s: float = 30) -> None:
    """Cancel every run still going and wait for them to end: a sandbox left running when
    its controller stops carries on, supervised, past the test."""
    active = {"pending", "running"}
    for run in client.get("/v1/runs").json()["runs"]:
        if run["status"] in active:
            client.post(f"/v1/runs/{run['run_id']}/cancel")
    wait_for(
        lambda: all(r["status"] not in active for r in client.get("/v1/runs").json()["runs"]),
        timeout_s,
        "every run cancelled",
    )
