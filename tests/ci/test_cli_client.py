"""`simplectl` as a CI step runs it: a subprocess, the client of a served controller.

Exit codes (0 all succeeded, 1 some failed, 2 usage or input, 3 budget, 4 cancelled),
the JUnit and Markdown reports, JSON on stdout with progress on stderr, tokens,
SIMPLE_SERVER/SIMPLE_TOKEN, retries when the server is away, and Idempotency-Key.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from tests.ci.conftest import SIMPLECTL, Served, ServeFactory, clean_env

RUN_ID = re.compile(r"\brun-[0-9a-f]{8}\b")


def _json_only(stdout: str) -> dict[str, Any]:
    """stdout holds one JSON document and nothing else."""
    report = json.loads(stdout)
    assert isinstance(report, dict)
    return report


def test_exit_0_report_json_on_stdout_progress_on_stderr(served: Served) -> None:
    result = served.simplectl(*served.remote("run", "ci-ok", "--wait", "--json"))
    assert result.returncode == 0, result.stderr
    report = _json_only(result.stdout)
    assert report["status"] == "succeeded"
    assert [s["template_id"] for s in report["sandboxes"]] == ["ci_ok"]
    assert report["totals"]["succeeded"] == 1 and report["totals"]["cost_usd"] > 0
    assert f"run {report['run_id']}" in result.stderr
    assert '"sandboxes"' not in result.stderr, "the report goes to stdout only"
    assert [r["run_id"] for r in served.runs()] == [report["run_id"]]
    assert f'"GET /v1/runs/{report["run_id"]}/stream HTTP/1.1" 200' in served.log(), (
        "--wait follows the live stream"
    )


def test_progress_a_line_per_change_in_ci_logs_bars_on_a_terminal(served: Served) -> None:
    result = served.simplectl(*served.remote("run", "ci_steps"))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    run_id = RUN_ID.search(lines[0])
    assert run_id, lines
    assert "\x1b" not in result.stderr and "\r" not in result.stderr, "no bars, no colours"
    assert f"run {run_id.group()}: running" in lines
    assert f"run {run_id.group()}: succeeded" in lines
    sandbox = [line.strip() for line in lines if line.startswith("  ci_steps: ")]
    assert any(re.match(r"ci_steps: running step [12]/3\b", line) for line in sandbox), lines
    assert sandbox[-1].startswith("ci_steps: succeeded step 3/3"), lines
    assert len(sandbox) == len(set(sandbox)), "a line per change, no repeats"
    assert "ci_steps" in result.stdout and "succeeded" in result.stdout, "the table on stdout"

    # The same run with stderr on a terminal: a bar per sandbox, redrawn in place.
    controller_side, terminal = pty.openpty()
    process = subprocess.Popen(
        [*SIMPLECTL, *served.remote("run", "ci_steps")],
        stdout=subprocess.DEVNULL,
        stderr=terminal,
        env={**served.cli_env, "TERM": "xterm-256color", "COLUMNS": "120"},
    )
    os.close(terminal)
    shown = bytearray()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not select.select([controller_side], [], [], 1)[0]:
            continue
        try:
            chunk = os.read(controller_side, 65536)
        except OSError:  # the terminal's other side closed: simplectl is done
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller_side)
    assert process.wait(timeout=30) == 0, shown.decode(errors="replace")
    text = shown.decode(errors="replace")
    assert "\x1b[" in text, "drawn in place"
    assert "━" in text, "a bar"
    assert "ci_steps" in text and "succeeded step 3/3" in text


def test_json_keeps_live_progress_on_stderr(served: Served) -> None:
    result = served.simplectl(*served.remote("run", "ci-ok", "--json"))
    assert result.returncode == 0, result.stderr
    assert "ci_ok: succeeded" in result.stderr


def test_exit_1_with_junit_and_markdown_reports(served: Served, tmp_path: Path) -> None:
    junit, markdown = tmp_path / "report.xml", tmp_path / "summary.md"
    result = served.simplectl(
        *served.remote(
            "run", "ci-mixed", "ci_garbled", "--wait", "--json", "--junit", str(junit),
            "--markdown", str(markdown),
        )
    )
    assert result.returncode == 1, result.stderr
    report = _json_only(result.stdout)
    assert report["status"] == "failed"
    rows = {s["template_id"]: s for s in report["sandboxes"]}

    suites = ET.parse(junit).getroot()
    assert suites.tag == "testsuites"
    suite = suites.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("3", "2")
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert set(cases) == set(rows) == {"ci_ok", "ci_fail", "ci_garbled"}, "a testcase per sandbox"
    for name, case in cases.items():
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props["sandbox_id"] == rows[name]["sandbox_id"]
        for key in ("cost_usd", "duration_s"):  # "None" when unknown (no snapshot: no cost)
            value, expected = props[key] or "", rows[name][key]
            assert value == "None" if expected is None else float(value) == pytest.approx(expected)
        assert props["exit_code"] == str(rows[name]["exit_code"])
        assert float(case.get("time", "")) == pytest.approx(rows[name]["duration_s"], abs=1e-3)
    assert cases["ci_ok"].find("failure") is None
    failure = cases["ci_fail"].find("failure")
    assert failure is not None
    assert "42" in failure.get("message", "") and "exited with code 42" in (failure.text or "")
    assert "exit code 42" in (failure.text or "")
    garbled = cases["ci_garbled"].find("failure")
    assert garbled is not None, "the file parsed although the error holds terminal escapes"
    message = garbled.get("message", "")
    assert "Boom: \\x1b[31mred\\x1b[0m alert\\x07 | done" in message, message
    assert message.endswith("(exit code 3)"), message
    assert rows["ci_garbled"]["error"].startswith("Boom: \x1b[31mred\x1b[0m alert\x07 | done")
    suite_props = {p.get("name") for p in suite.find("properties") or []}
    assert {"cost_usd", "tokens_used"} <= suite_props

    summary = markdown.read_text()
    assert f"`{report['run_id']}`" in summary and "failed" in summary
    assert "1/3 succeeded" in summary
    assert re.search(r"^\| ci_fail \|.*\| 42 \|", summary, re.M), summary
    assert re.search(r"^\| ci_ok \|.*succeeded", summary, re.M), summary
    assert "alert\\x07 \\| done" in summary, "escaped for the table"
    again = served.simplectl(
        *served.remote("report", report["run_id"], "--format", "markdown")
    )
    assert again.returncode == 0 and again.stdout == summary, "file and API agree"


def test_exit_2_names_the_unknown_template_or_suite_or_the_token(served: Served) -> None:
    for name in ("no_such_template", "no-such-suite"):
        result = served.simplectl(*served.remote("run", "ci_ok", name))
        assert result.returncode == 2, result.stderr
        assert name in result.stderr and "simplectl templates" in result.stderr

    missing = served.simplectl("run", "ci-ok", "--server", served.url)
    assert missing.returncode == 2, missing.stderr
    assert "token" in missing.stderr.lower()
    assert "--token" in missing.stderr and "SIMPLE_TOKEN" in missing.stderr
    wrong = served.simplectl("status", "--server", served.url, "--token", "not-a-token")
    assert wrong.returncode == 2, wrong.stderr
    assert "invalid API token" in wrong.stderr and "SIMPLE_API_TOKENS" in wrong.stderr
    assert served.runs() == [], "nothing started"


def test_exit_3_when_the_budget_stops_the_run(served: Served) -> None:
    result = served.simplectl(
        *served.remote(
            "run", "ci_pricey", "ci_ok", "--budget", "0.1", "--parallel", "1",
            "--priority", "cost", "--json",
        )
    )
    assert result.returncode == 3, result.stderr
    assert _json_only(result.stdout)["status"] == "budget_exceeded"


def test_exit_4_when_another_process_cancels_the_run(served: Served) -> None:
    follower = subprocess.Popen(
        [*SIMPLECTL, *served.remote("run", "ci_slow", "--wait")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=served.cli_env,
    )
    assert follower.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while not any("ci_slow: running" in line for line in seen):
        line = follower.stderr.readline()
        assert line and time.monotonic() < deadline, f"no progress: {seen}"
        seen.append(line)
    match = RUN_ID.search(seen[0])
    assert match, seen
    cancel = served.simplectl(*served.remote("cancel", match.group()))
    assert cancel.returncode == 0, cancel.stderr
    out, rest = follower.communicate(timeout=60)
    assert follower.returncode == 4, "".join(seen) + rest
    assert f"run {match.group()}: cancelled" in rest
    assert "cancelled" in out


def test_simple_server_and_simple_token_from_the_environment(served: Served) -> None:
    env = {"SIMPLE_SERVER": served.url, "SIMPLE_TOKEN": served.tokens[1]}
    result = served.simplectl("run", "ci-ok", "--json", env=env)
    assert result.returncode == 0, result.stderr
    run_id = _json_only(result.stdout)["run_id"]
    assert [r["run_id"] for r in served.runs()] == [run_id], "ran on the server"
    status = served.simplectl("status", run_id, "--json", env=env)
    assert status.returncode == 0 and json.loads(status.stdout)["status"] == "succeeded"


@contextmanager
def _flaky_server(broken: int, status: int | None = None) -> Iterator[tuple[str, list[int]]]:
    """A loopback HTTP server whose first `broken` connections fail (closed at once, or
    answered `status`); later ones get 200 `{"runs": []}`. Yields its URL and a counter."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    count = [0]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                count[0] += 1
                conn.settimeout(5)
                conn.recv(65536)
                if count[0] <= broken and status is None:
                    continue  # close without an answer: a transport error
                code, body = (status, b'{"error": {"message": "busy"}}') if count[0] <= broken \
                    else (200, b'{"runs": []}')
                conn.sendall(
                    f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
                )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", count
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


@pytest.fixture
def offline_env(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment for tests that need no served controller."""
    return clean_env(SIMPLE_DATA_DIR=str(tmp_path / "cli-data"))


def test_an_unreachable_server_is_retried_then_named_clearly(offline_env: dict[str, str]) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused_url = f"http://127.0.0.1:{closed.getsockname()[1]}"  # bound, not listening
        with _flaky_server(broken=1000) as (hanging_up_url, count):
            runs = {
                url: subprocess.Popen(
                    [*SIMPLECTL, "status", "--server", url, "--token", "t"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=offline_env,
                )
                for url in (refused_url, hanging_up_url)
            }
            outcomes = {url: (p.communicate(timeout=60), p.returncode) for url, p in runs.items()}
            attempts = count[0]
    for url, ((out, err), code) in outcomes.items():
        assert code not in (0, 2), err
        assert out == ""
        assert f"cannot reach the SIMPLE server at {url}" in err, err
        assert "after 5 attempts" in err and "SIMPLE_SERVER" in err, err
    assert attempts == 5, "every attempt reached the server: it was retried"


@pytest.mark.parametrize("status", [None, 503], ids=["hang-up", "503"])
def test_a_server_that_comes_back_is_retried_until_it_answers(
    offline_env: dict[str, str], status: int | None
) -> None:
    with _flaky_server(broken=2, status=status) as (url, count):
        result = subprocess.run(
            [*SIMPLECTL, "status", "--json", "--server", url, "--token", "t"],
            capture_output=True,
            text=True,
            timeout=60,
            env=offline_env,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"runs": []}
        assert count[0] == 3


def test_idempotency_key_a_retried_step_starts_no_second_run(served: Served) -> None:
    key = "ci-job-4242"
    first = served.simplectl(*served.remote("run", "ci-ok", "--no-wait", "--idempotency-key", key))
    assert first.returncode == 0, first.stderr
    run_id = first.stdout.strip()
    assert RUN_ID.fullmatch(run_id), first.stdout
    again = served.simplectl(
        *served.remote("run", "ci-ok", "--no-wait"), env={"SIMPLE_IDEMPOTENCY_KEY": key}
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == run_id, "the same key and body: the same run"
    other = served.simplectl(
        *served.remote("run", "ci-mixed", "--no-wait", "--idempotency-key", key)
    )
    assert other.returncode == 2, other.stderr
    assert "Idempotency-Key" in other.stderr and run_id in other.stderr
    assert [r["run_id"] for r in served.runs()] == [run_id], "one run"
    waited = served.simplectl(*served.remote("run", "ci-ok", "--json", "--idempotency-key", key))
    assert waited.returncode == 0, waited.stderr
    assert _json_only(waited.stdout)["run_id"] == run_id, "--wait follows the same run"
    assert len(served.runs()) == 1


def test_serve_without_tokens_says_that_every_local_process_may_use_the_api(
    serve: ServeFactory,
) -> None:
    open_api = serve(SIMPLE_API_TOKENS="")
    assert "no SIMPLE_API_TOKENS: any process on this machine can use the API" in (
        open_api.log_path.read_text())
    assert "no SIMPLE_API_TOKENS" not in serve().log_path.read_text()
