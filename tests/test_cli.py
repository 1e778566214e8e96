"""`simplectl` as a user runs it: a real subprocess, the embedded controller, exit codes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.settings import Settings

SIMPLECTL = [sys.executable, "-m", "controller.cli"]


def _env(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    env.update(
        SIMPLE_DATA_DIR=str(settings.data_dir),
        SIMPLE_DATABASE_URL=settings.resolved_database_url,
        **extra,
    )
    return env


def _run(settings: Settings, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SIMPLECTL, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(settings, **extra),
    )


@pytest.fixture
def tiny_catalog(catalog_dir: Callable[[str], Path]) -> Path:
    return catalog_dir("""
        templates:
          - id: tiny_ok
            category: tiny
            mechanisms: [M1, M2]
            estimate: {cost_usd: [0.1, 0.5], runtime_s: [1, 2]}
            config: {agents: 2, steps: 2, llm_latency_ms: 5}
          - id: tiny_fail
            category: tiny
            estimate: {cost_usd: [0.1, 0.5], runtime_s: [1, 2]}
            config: {agents: 2, steps: 2, llm_latency_ms: 5, exit_code: 42}
          - id: tiny_pricey
            category: tiny
            estimate: {cost_usd: [0.01, 0.05], runtime_s: [1, 2]}
            config: {agents: 4, steps: 8, llm_latency_ms: 5}
          - id: tiny_slow
            category: tiny
            estimate: {cost_usd: [0.1, 0.5], runtime_s: [1, 2]}
            config: {agents: 2, steps: 2, sleep_s: 60}
        suites:
          tiny-ok: [tiny_ok]
    """)


def test_quick_suite_json_report(settings: Settings) -> None:
    result = _run(settings, "run", "quick", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    totals = report["totals"]
    assert report["status"] == "succeeded"
    assert totals["sandboxes"] == 7 and totals["succeeded"] == 7
    for key in ("cost_usd", "tokens_used", "llm_calls", "entities_created", "timepoints_created"):
        assert totals[key] > 0, key
    assert totals["mechanism_coverage_pct"] > 0
    assert "run-" in result.stderr, "progress goes to stderr, not stdout"


def test_exit_1_when_a_sandbox_fails(settings: Settings, tiny_catalog: Path) -> None:
    result = _run(settings, "run", "tiny-ok", "tiny_fail", "--catalog", str(tiny_catalog), "--json")
    assert result.returncode == 1, result.stderr
    rows = {s["template_id"]: s for s in json.loads(result.stdout)["sandboxes"]}
    assert rows["tiny_ok"]["status"] == "succeeded"
    assert rows["tiny_fail"]["status"] == "failed" and rows["tiny_fail"]["exit_code"] == 42


def test_exit_2_names_the_unknown_template(settings: Settings) -> None:
    result = _run(settings, "run", "quick", "no_such_template")
    assert result.returncode == 2
    assert "no_such_template" in result.stderr
    assert _run(settings, "run", "quick", "--priority", "fastest").returncode == 2


def test_exit_2_names_a_bad_setting_without_a_traceback(settings: Settings) -> None:
    result = _run(settings, "run", "quick", "--dry-run", SIMPLE_PROCESS_NICE="25")
    assert result.returncode == 2
    assert "SIMPLE_PROCESS_NICE='25'" in result.stderr
    assert "less than or equal to 19" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_on_a_taken_port_says_so_before_starting_anything(settings: Settings) -> None:
    """The port is bound before the controller starts: else it adopted sandboxes, started
    its reconciler and stopped again, and uvicorn's own error ended the process."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run(settings, "serve", "--host", "127.0.0.1", "--port", str(port))
    assert result.returncode == 1, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "--port" in result.stderr  # what to do
    assert "controller stopped" not in result.stderr  # it never started
    assert "Traceback" not in result.stderr


def test_exit_2_for_a_bad_catalog_naming_file_and_field(
    settings: Settings, catalog_dir: Callable[[str], Path]
) -> None:
    bad = catalog_dir(
        "templates:\n  - id: oops\n    category: x\n    mechanisms: [M99]\n"
        "    estimate: {cost_usd: [1, 2], runtime_s: [1, 2]}\n"
    )
    result = _run(settings, "run", "oops", "--catalog", str(bad))
    assert result.returncode == 2
    assert "user.yaml" in result.stderr and "oops" in result.stderr and "M99" in result.stderr


def test_exit_3_when_the_budget_stops_the_run(settings: Settings, tiny_catalog: Path) -> None:
    result = _run(
        settings,
        "run",
        "tiny_pricey",
        "tiny_ok",
        "--budget",
        "0.1",
        "--parallel",
        "1",
        "--priority",
        "cost",
        "--catalog",
        str(tiny_catalog),
        "--json",
    )
    assert result.returncode == 3, result.stderr
    assert json.loads(result.stdout)["status"] == "budget_exceeded"


def test_exit_4_when_interrupted(settings: Settings, tiny_catalog: Path) -> None:
    process = subprocess.Popen(
        [*SIMPLECTL, "run", "tiny_slow", "--catalog", str(tiny_catalog)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(settings),
    )
    deadline = time.monotonic() + 30
    seen = ""
    assert process.stderr is not None
    while "running" not in seen and time.monotonic() < deadline:
        seen += process.stderr.readline()
    process.send_signal(signal.SIGINT)
    # communicate, not wait: the progress lines written while it cancels must not fill a
    # pipe nobody reads (the client would block on it and never exit)
    _, rest = process.communicate(timeout=120)
    assert process.returncode == 4, seen + rest


def test_plan_templates_and_dry_run(settings: Settings) -> None:
    plan = json.loads(_run(settings, "plan", "ultra", "--budget", "50").stdout)
    assert plan["estimated_cost_usd"][1] <= 50 and plan["excluded"]
    listing = json.loads(_run(settings, "templates", "--suite", "quick", "--json").stdout)
    assert listing["count"] == 7
    dry = _run(settings, "run", "quick", "--dry-run", "-o", "json")
    assert dry.returncode == 0, dry.stderr
    objects = json.loads(dry.stdout)["objects"]
    assert len(objects) == 7 and all("SIMPLE_SANDBOX_TOKEN" in o["env"] for o in objects)
    assert not list((settings.data_dir / "sandboxes").glob("*")), "dry run starts nothing"


def test_status_report_and_logs_after_a_run(settings: Settings, tiny_catalog: Path) -> None:
    done = _run(settings, "run", "tiny_ok", "--catalog", str(tiny_catalog), "--json")
    report = json.loads(done.stdout)
    run_id, sandbox_id = report["run_id"], report["sandboxes"][0]["sandbox_id"]
    status = json.loads(_run(settings, "status", run_id, "--json").stdout)
    assert status["status"] == "succeeded"
    junit = _run(settings, "report", run_id, "--format", "junit").stdout
    assert "<testcase" in junit and "tiny_ok" in junit
    log = _run(settings, "logs", sandbox_id)
    assert log.returncode == 0 and "completed" in log.stdout.lower()
    missing = _run(settings, "status", "run-00000000")
    assert missing.returncode == 2 and "run-00000000" in missing.stderr


def test_the_report_table_keeps_whole_template_ids_in_an_80_column_log(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Piped into a CI log (no terminal, 80 columns), ids were cut to `board_me…`."""
    from controller.cli.run import _print_report

    long_id = "detective_prospection"  # the catalog's longest
    sandbox = {"template_id": long_id, "status": "succeeded", "attempts": 1, "exit_code": 0,
               "duration_s": 2.5, "cost_usd": 0.2, "items": None, "error": None}
    failed = {**sandbox, "template_id": "board_meeting", "status": "failed", "exit_code": 1,
              "error": "Boom: a long error message " * 4}
    totals = {"succeeded": 1, "sandboxes": 2, "failed": 1, "cost_usd": 0.4, "tokens_used": 0,
              "llm_calls": 0, "entities_created": 0, "timepoints_created": 0,
              "mechanisms_covered": [], "mechanism_coverage_pct": 0}
    _print_report({"run_id": "run-1", "status": "failed", "sandboxes": [sandbox, failed],
                   "totals": totals})
    out = capsys.readouterr().out
    assert long_id in out and "board_meeting" in out and "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "error" in out and "items" not in out  # an empty column is left out
