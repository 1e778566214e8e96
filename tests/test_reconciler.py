"""The reconciler end to end on the process backend with the real sandbox runtime:
timeout, retry with backoff, non-transient failure, cancel, budget stop, memory limit,
and a controller restarted mid-run that adopts what still runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from controller.cli.embedded import EmbeddedServer
from controller.settings import Settings
from tests.e2e_helpers import report, start_run, wait_for, wait_run
from tests.services import free_port


def _catalog(write: Callable[[str], Path], templates: dict[str, dict[str, Any]]) -> Path:
    lines = ["templates:"]
    for template_id, fields in templates.items():
        config = fields.get("config", {})
        lines += [
            f"  - id: {template_id}",
            "    category: test",
            f"    mechanisms: {json.dumps(fields.get('mechanisms', ['M1']))}",
            f"    estimate: {{cost_usd: {fields.get('cost', [0.1, 0.5])}, runtime_s: [1, 2]}}",
            f"    timeout_s: {fields.get('timeout_s', 60)}",
            f"    resources: {{cpu: '1', memory: {fields.get('memory', '1Gi')}}}",
            f"    config: {json.dumps({'agents': 2, 'steps': 2, 'llm_latency_ms': 5, **config})}",
        ]
    return write("\n".join(lines) + "\n")


def _serve(settings: Settings, catalog: Path, **extra: Any) -> EmbeddedServer:
    return EmbeddedServer(settings.model_copy(update={"catalog_dirs": [catalog], **extra}))


def _sandbox(run: dict[str, Any], template_id: str) -> dict[str, Any]:
    return dict(next(s for s in run["sandboxes"] if s["template_id"] == template_id))


def test_timeout_kills_the_sandbox(settings: Settings, catalog_dir: Callable[[str], Path]) -> None:
    catalog = _catalog(catalog_dir, {"slow": {"timeout_s": 1, "config": {"sleep_s": 60}}})
    with _serve(settings, catalog) as server:
        run = wait_run(server.url, start_run(server.url, {"templates": ["slow"]}), 30)
    slow = _sandbox(run, "slow")
    assert slow["status"] == "timeout"
    assert "timed out after 1 s" in slow["error"]
    assert run["status"] == "failed"


def test_transient_failure_is_retried_and_every_attempt_recorded(
    settings: Settings, catalog_dir: Callable[[str], Path]
) -> None:
    catalog = _catalog(
        catalog_dir,
        {
            "flaky": {"config": {"fail_attempts": 2, "fail_transient": True}},
            "broken": {"config": {"fail_at_step": 1}},
        },
    )
    with _serve(settings, catalog) as server:
        run_id = start_run(server.url, {"templates": ["flaky", "broken"]})
        run = wait_run(server.url, run_id)
        flaky = httpx.get(
            f"{server.url}/v1/sandboxes/{_sandbox(run, 'flaky')['sandbox_id']}", timeout=10
        ).json()
        result = report(server.url, run_id)
    assert flaky["status"] == "succeeded" and flaky["attempts"] == 3
    history = flaky["attempt_history"]
    assert [a["status"] for a in history] == ["failed", "failed", "succeeded"]
    assert all(a["exit_code"] == 1 for a in history[:2])
    broken = _sandbox(run, "broken")
    assert broken["status"] == "failed" and broken["attempts"] == 1, "not transient: no retry"
    assert run["status"] == "failed"
    flaky_row = next(s for s in result["sandboxes"] if s["template_id"] == "flaky")
    assert flaky_row["cost_usd"] > 0, "the successful attempt's snapshot is aggregated"


def test_cancel_stops_running_and_skips_pending(
    settings: Settings, catalog_dir: Callable[[str], Path]
) -> None:
    catalog = _catalog(catalog_dir, {f"long{i}": {"config": {"sleep_s": 60}} for i in range(3)})
    with _serve(settings, catalog) as server:
        run_id = start_run(
            server.url, {"templates": ["long0", "long1", "long2"], "max_parallel": 2}
        )
        wait_for(
            lambda: (
                sum(
                    s["status"] == "running"
                    for s in httpx.get(f"{server.url}/v1/runs/{run_id}", timeout=10).json()[
                        "sandboxes"
                    ]
                )
                == 2
            ),
            what="two running sandboxes",
        )
        httpx.post(f"{server.url}/v1/runs/{run_id}/cancel", timeout=10).raise_for_status()
        run = wait_run(server.url, run_id, 30)
        sandbox_dirs = list((settings.data_dir / "sandboxes").glob("*"))
    assert run["status"] == "cancelled"
    statuses = sorted(s["status"] for s in run["sandboxes"])
    assert statuses == ["cancelled", "cancelled", "skipped"]
    assert sandbox_dirs == [], "stopped sandboxes are removed after their logs are archived"


def test_budget_stop_ends_the_run_budget_exceeded(
    settings: Settings, catalog_dir: Callable[[str], Path]
) -> None:
    # Each estimates at most $0.05, but the runtime reports about $0.2: the first
    # one's reported cost passes the $0.1 budget, so the rest never start.
    catalog = _catalog(
        catalog_dir,
        {
            f"pricey{i}": {"cost": [0.01, 0.05], "config": {"steps": 6, "agents": 3}}
            for i in range(2)
        },
    )
    with _serve(settings, catalog) as server:
        run_id = start_run(
            server.url,
            {
                "templates": ["pricey0", "pricey1"],
                "budget_usd": 0.1,
                "max_parallel": 1,
                "priority": "cost",
            },
        )
        run = wait_run(server.url, run_id)
    assert run["status"] == "budget_exceeded"
    first, second = run["sandboxes"]
    assert first["status"] in ("cancelled", "succeeded")
    assert second["status"] == "skipped" and "budget" in second["error"]


def test_memory_limit_is_oom(settings: Settings, catalog_dir: Callable[[str], Path]) -> None:
    catalog = _catalog(catalog_dir, {"hog": {"memory": "64Mi", "config": {"memory_mb": 300}}})
    with _serve(settings, catalog, max_attempts=1) as server:
        run = wait_run(server.url, start_run(server.url, {"templates": ["hog"]}))
    assert _sandbox(run, "hog")["status"] == "oom"


def test_restarted_controller_adopts_running_sandboxes(
    settings: Settings, catalog_dir: Callable[[str], Path]
) -> None:
    catalog = _catalog(catalog_dir, {f"steady{i}": {"config": {"sleep_s": 2}} for i in range(3)})
    port = free_port()
    first = EmbeddedServer(settings.model_copy(update={"catalog_dirs": [catalog]}), port=port)
    with first:
        run_id = start_run(first.url, {"templates": ["steady0", "steady1", "steady2"]})
        wait_for(
            lambda: all(
                s["status"] == "running"
                for s in httpx.get(f"{first.url}/v1/runs/{run_id}", timeout=10).json()["sandboxes"]
            ),
            what="all sandboxes running",
        )
    # The first controller is gone; its sandboxes go on. A new one takes over.
    second = EmbeddedServer(settings.model_copy(update={"catalog_dirs": [catalog]}), port=port)
    with second:
        run = wait_run(second.url, run_id)
        result = report(second.url, run_id)
    assert run["status"] == "succeeded"
    assert [s["attempts"] for s in run["sandboxes"]] == [1, 1, 1], "adopted, not relaunched"
    assert result["totals"]["succeeded"] == 3 and result["totals"]["cost_usd"] > 0


def test_vanished_sandbox_is_lost_then_retried(
    settings: Settings, catalog_dir: Callable[[str], Path]
) -> None:
    import os
    import signal

    catalog = _catalog(catalog_dir, {"victim": {"config": {"sleep_s": 3}}})
    with _serve(settings, catalog, lost_grace_s=0.5) as server:
        run_id = start_run(server.url, {"templates": ["victim"]})
        sandbox_id = wait_for(
            lambda: next(
                (
                    s["sandbox_id"]
                    for s in httpx.get(f"{server.url}/v1/runs/{run_id}", timeout=10).json()[
                        "sandboxes"
                    ]
                    if s["status"] == "running"
                ),
                None,
            ),
            what="running sandbox",
        )
        attempt_dir = settings.data_dir / "sandboxes" / sandbox_id / "attempt-1"
        supervisor = json.loads(
            wait_for(
                lambda: (
                    (attempt_dir / "supervisor.json").exists()
                    and (attempt_dir / "supervisor.json").read_text()
                ),
                what="supervisor",
            )
        )
        child = json.loads(
            wait_for(
                lambda: (
                    (attempt_dir / "child.json").exists()
                    and (attempt_dir / "child.json").read_text()
                ),
                what="child",
            )
        )
        os.kill(supervisor["pid"], signal.SIGKILL)
        os.killpg(child["pgid"], signal.SIGKILL)
        run = wait_run(server.url, run_id)
        detail = httpx.get(f"{server.url}/v1/sandboxes/{sandbox_id}", timeout=10).json()
    assert [a["status"] for a in detail["attempt_history"]] == ["lost", "succeeded"]
    assert run["status"] == "succeeded"
