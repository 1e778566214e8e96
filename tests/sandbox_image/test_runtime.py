"""`python -m sandbox_image` end to end: a real subprocess against a fake controller."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox_image.contract import ENV_SNAPSHOT_URL, SandboxEnv

from .conftest import Recorder

REPO = Path(__file__).resolve().parents[2]
SANDBOX_ID = "sb-test-1"
QUICK = {"agents": 3, "steps": 3, "llm_latency_ms": 2}


def sandbox_environ(ctrl: Recorder, config: dict[str, Any], seed: int = 42,
                    attempt: int = 1) -> dict[str, str]:
    env = SandboxEnv(
        sandbox_id=SANDBOX_ID, run_id="run-1", template_id="board_meeting", attempt=attempt,
        template_config=config, seed=seed, controller_url=ctrl.url, sandbox_token="tok-1",
        snapshot_url=f"{ctrl.url}/snapshots/{SANDBOX_ID}",
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    return {**base, **env.to_environ(), "PYTHONPATH": str(REPO), "SIMPLE_FLUSH_TIMEOUT_S": "10"}


def start(ctrl: Recorder, cwd: Path, config: dict[str, Any], **kw: Any) -> subprocess.Popen[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "sandbox_image"], cwd=cwd, text=True,
                            env=sandbox_environ(ctrl, config, **kw),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def run(ctrl: Recorder, cwd: Path, config: dict[str, Any], **kw: Any) -> tuple[int, str]:
    proc = start(ctrl, cwd, config, **kw)
    _, stderr = proc.communicate(timeout=60)
    return proc.returncode, stderr


def snapshot_rows(body: bytes, tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    path = tmp_path / f"uploaded-{time.monotonic_ns()}.sqlite"
    path.write_bytes(body)
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    (run_row,) = [dict(r) for r in conn.execute("SELECT * FROM runs")]
    steps = [dict(r) for r in conn.execute("SELECT * FROM steps ORDER BY step")]
    conn.close()
    return run_row, steps


def assert_gapless(ctrl: Recorder) -> None:
    seqs = sorted(e["seq"] for e in ctrl.events)
    assert seqs == list(range(1, len(seqs) + 1))
    assert len({e["id"] for e in ctrl.events}) == len(seqs)


def test_a_template_run_reports_everything(fake_controller: Recorder, tmp_path: Path) -> None:
    config = {"agents": 6, "steps": 7, "mechanisms": ["M1", "M3"]}
    started = time.monotonic()
    code, stderr = run(fake_controller, tmp_path / "box", config)
    wall_s = time.monotonic() - started
    print(f"6 agents x 7 steps: {wall_s:.2f} s wall time")
    assert code == 0, stderr
    assert wall_s < 10
    assert_gapless(fake_controller)
    types = fake_controller.types()
    assert types[0] == "started" and types[-1] == "completed"
    assert types.count("progress") == 7 and types.count("completed") == 1
    assert set(fake_controller.post_auth) == {"Bearer tok-1"}
    (started_event,) = fake_controller.of_type("started")
    assert started_event["data"] == {"attempt": 1, "steps_total": 7, "agents": 6,
                                     "resumed_from_step": None}
    progress = fake_controller.of_type("progress")
    assert [p["data"]["step"] for p in progress] == list(range(1, 8))
    # a checkpoint at step 5, then the final snapshot; no Authorization on either
    assert len(fake_controller.puts) == 2 and fake_controller.put_auth == [None, None]
    assert fake_controller.put_paths == [f"/snapshots/{SANDBOX_ID}"] * 2
    run_row, steps = snapshot_rows(fake_controller.puts[-1], tmp_path)
    totals = fake_controller.of_type("completed")[0]["data"]
    assert run_row["run_id"] == SANDBOX_ID and run_row["template_id"] == "board_meeting"
    assert run_row["status"] == "completed" and run_row["finished_at"].endswith("Z")
    assert json.loads(run_row["mechanisms_used"]) == ["M1", "M3"] == totals["mechanisms_used"]
    assert [s["step"] for s in steps] == list(range(1, 8))
    assert sum(s["cost_usd"] for s in steps) == pytest.approx(run_row["cost_usd"])
    assert sum(s["tokens"] for s in steps) == run_row["tokens_used"]
    for key in ("cost_usd", "tokens_used", "llm_calls", "entities_created",
                "timepoints_created"):
        assert run_row[key] == totals[key] and run_row[key] > 0
    assert progress[-1]["data"]["cost_usd"] == run_row["cost_usd"]
    assert 0.2 < run_row["cost_usd"] < 1.2
    checkpoint_row, checkpoint_steps = snapshot_rows(fake_controller.puts[0], tmp_path)
    assert checkpoint_row["status"] == "running" and len(checkpoint_steps) == 5
    assert "started" in stderr and "step 7/7" in stderr and "exiting with code 0" in stderr


def test_the_same_seed_gives_the_same_results(fake_controller: Recorder,
                                              tmp_path: Path) -> None:
    results = []
    for attempt_dir in ("a", "b"):
        code, stderr = run(fake_controller, tmp_path / attempt_dir, QUICK, seed=5)
        assert code == 0, stderr
        run_row, steps = snapshot_rows(fake_controller.puts[-1], tmp_path)
        for key in ("started_at", "finished_at"):
            run_row.pop(key)
        for step in steps:
            step.pop("duration_ms")
        results.append((run_row, steps))
    assert results[0] == results[1]


def test_a_controller_outage_loses_nothing(fake_controller: Recorder, tmp_path: Path) -> None:
    fake_controller.fail_posts = 3
    fake_controller.fail_puts = 2
    code, stderr = run(fake_controller, tmp_path, QUICK)
    assert code == 0, stderr
    assert_gapless(fake_controller)
    assert fake_controller.types() == ["started", "progress", "progress", "progress",
                                       "completed"]
    assert len(fake_controller.puts) == 1 and "retrying" in stderr


def test_a_failing_step_exits_1_with_a_failed_event(fake_controller: Recorder,
                                                    tmp_path: Path) -> None:
    config = {**QUICK, "fail_at_step": 2, "fail_transient": True}
    code, stderr = run(fake_controller, tmp_path, config)
    assert code == 1, stderr
    assert_gapless(fake_controller)
    assert fake_controller.types() == ["started", "progress", "failed"]
    failed = fake_controller.of_type("failed")[0]["data"]
    assert failed["step"] == 2
    assert failed["error"]["type"] == "injected_failure"
    assert failed["error"]["transient"] is True and "step 2" in failed["error"]["message"]
    run_row, steps = snapshot_rows(fake_controller.puts[-1], tmp_path)
    assert run_row["status"] == "failed" and len(steps) == 1


def test_agent_errors_become_error_events(fake_controller: Recorder, tmp_path: Path) -> None:
    code, stderr = run(fake_controller, tmp_path, {**QUICK, "agent_error_rate": 0.3})
    assert code == 0, stderr
    _, steps = snapshot_rows(fake_controller.puts[-1], tmp_path)
    errors = fake_controller.of_type("error")
    assert len(errors) == sum(s["failures"] for s in steps) > 0
    assert {"message", "step", "agent"} <= set(errors[0]["data"])


def test_exit_code_and_memory_hooks(fake_controller: Recorder, tmp_path: Path) -> None:
    code, stderr = run(fake_controller, tmp_path, {**QUICK, "exit_code": 42, "memory_mb": 16})
    assert code == 42, stderr
    assert "touched 16 MiB" in stderr
    assert fake_controller.types()[-1] == "completed"


def test_sigterm_while_sleeping_exits_143(fake_controller: Recorder, tmp_path: Path) -> None:
    proc = start(fake_controller, tmp_path, {**QUICK, "sleep_s": 30})
    try:
        assert fake_controller.wait_for(lambda: bool(fake_controller.of_type("started")))
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 143, stderr
    assert fake_controller.types() == ["started", "failed"]
    error = fake_controller.of_type("failed")[0]["data"]["error"]
    assert error["type"] == "cancelled" and error["transient"] is False
    run_row, _ = snapshot_rows(fake_controller.puts[-1], tmp_path)
    assert run_row["status"] == "failed"


def test_an_invalid_config_fails_naming_the_key(fake_controller: Recorder,
                                                tmp_path: Path) -> None:
    code, _ = run(fake_controller, tmp_path, {"agents": "six"})
    assert code == 1
    (failed,) = fake_controller.of_type("failed")
    assert failed["data"]["error"]["type"] == "config_error"
    assert "'agents'" in failed["data"]["error"]["message"]


def test_a_refused_final_upload_exits_1(fake_controller: Recorder, tmp_path: Path) -> None:
    fake_controller.put_status = 403
    code, stderr = run(fake_controller, tmp_path, QUICK)
    assert code == 1
    assert "final snapshot NOT uploaded" in stderr and "HTTP 403" in stderr


def test_missing_contract_env_exits_2(fake_controller: Recorder, tmp_path: Path) -> None:
    env = sandbox_environ(fake_controller, QUICK)
    del env[ENV_SNAPSHOT_URL]
    proc = subprocess.run([sys.executable, "-m", "sandbox_image"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert ENV_SNAPSHOT_URL in proc.stderr
    assert fake_controller.post_sizes == [] and fake_controller.put_auth == []


def test_the_runtime_starts_without_the_http_clients_command_line() -> None:
    """httpx imports its CLI (rich, click) when they are installed, as beside the
    controller: ~40 ms of every sandbox's start. The runtime's entry point keeps it out."""
    if subprocess.run([sys.executable, "-c", "import rich, click"], check=False).returncode:
        pytest.fail("rich and click are the controller's dependencies: install the project")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "sandbox_image"],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=60, check=False,
    )
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "sandbox_image.runtime" in imported and "httpx" in imported  # it got that far
    assert done.returncode == 2 and "missing environment variables" in done.stderr
    assert not imported & {"rich", "click"}, sorted(imported & {"rich", "click"})
