"""A real `simplectl serve` subprocess with API tokens, a tiny catalog, and the CLI to drive it.

`served` starts `simplectl serve --host 127.0.0.1 --port <free>` on the `settings`
fixture's data dir and database (PostgreSQL when SIMPLE_TEST_DATABASE_URL is set),
with SIMPLE_API_TOKENS set and a catalog of fast templates built on the built-in
runtime's config hooks. Its stdout and stderr go to a file the tests can read.
At teardown active runs are cancelled, the server is stopped, and any sandbox
process group still alive under SIMPLE_DATA_DIR/sandboxes is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from controller.settings import Settings
from tests.services import free_port

SIMPLECTL = [sys.executable, "-m", "controller.cli"]
START_TIMEOUT_S = 30.0
FINAL = {"succeeded", "failed", "cancelled", "budget_exceeded"}

# Fast templates on the built-in runtime's hooks: each ends in about a second.
CATALOG = """
templates:
  - id: ci_ok
    category: ci
    description: two agents, two steps
    mechanisms: [M1, M2]
    estimate: {cost_usd: [0.1, 0.5], runtime_s: [1, 2]}
    timeout_s: 120
    config: {agents: 2, steps: 2, llm_latency_ms: 5}
  - id: ci_fail
    category: ci
    description: completes, then exits 42
    mechanisms: [M3]
    estimate: {cost_usd: [0.1, 0.5], runtime_s: [1, 2]}
    timeout_s: 120
    config: {agents: 2, steps: 2, llm_latency_ms: 5, exit_code: 42}
  - id: ci_steps
    category: ci-extra
    description: three slower steps, for live progress
    estimate: {cost_usd: [0.1, 0.5], runtime_s: [2, 4]}
    timeout_s: 120
    config: {agents: 2, steps: 3, llm_latency_ms: 100}
  - id: ci_pricey
    category: ci-extra
    description: estimated cheap, reports more than a $0.10 budget
    estimate: {cost_usd: [0.01, 0.05], runtime_s: [1, 2]}
    timeout_s: 120
    config: {agents: 4, steps: 8, llm_latency_ms: 5}
  - id: ci_slow
    category: ci-extra
    description: sleeps a minute (to be cancelled)
    estimate: {cost_usd: [0.1, 0.5], runtime_s: [1, 2]}
    timeout_s: 120
    config: {agents: 2, steps: 2, sleep_s: 60}
  - id: ci_token
    category: ci-extra
    description: prints its own sandbox token and posts one event with it
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 60
    command: [python, {token_script}]
  - id: ci_garbled
    category: ci-extra
    description: fails with terminal escapes in its error message
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 60
    command: [python, {garbled_script}]
suites:
  ci-ok: [ci_ok]
  ci-mixed: [ci_ok, ci_fail]
"""

# A sandbox of our own (standard library only): it shows its token on stdout, which
# the test reads back with `simplectl logs`, and proves the token works while it runs.
TOKEN_SCRIPT = '''
import json, os, urllib.error, urllib.request
token = os.environ["SIMPLE_SANDBOX_TOKEN"]
url = (f"{os.environ['SIMPLE_CONTROLLER_URL'].rstrip('/')}/v1/sandboxes/"
       f"{os.environ['SIMPLE_SANDBOX_ID']}/events")
body = {"events": [{"id": "token-probe", "seq": 1, "type": "started",
                    "time": "2026-01-01T00:00:00Z", "data": {}}]}
request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
    headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        status = response.status
except urllib.error.HTTPError as e:
    status = e.code
print(f"SANDBOX_TOKEN={token}")
print(f"EVENT_STATUS={status}", flush=True)
'''

# A sandbox whose `failed` event carries what a real program's error may hold: colours,
# a bell. The reports must stay readable, and the JUnit file valid XML.
GARBLED_SCRIPT = '''
import json, os, sys, urllib.request
url = (f"{os.environ['SIMPLE_CONTROLLER_URL'].rstrip('/')}/v1/sandboxes/"
       f"{os.environ['SIMPLE_SANDBOX_ID']}/events")
error = {"type": "Boom", "message": "\\x1b[31mred\\x1b[0m alert\\x07 | done", "transient": False}
body = {"events": [
    {"id": "g1", "seq": 1, "type": "started", "time": "2026-01-01T00:00:00Z", "data": {}},
    {"id": "g2", "seq": 2, "type": "failed", "time": "2026-01-01T00:00:01Z",
     "data": {"error": error}}]}
request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
    headers={"Authorization": f"Bearer {os.environ['SIMPLE_SANDBOX_TOKEN']}",
             "Content-Type": "application/json"})
urllib.request.urlopen(request, timeout=10).read()
sys.exit(3)
'''


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any SIMPLE_* variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    env.update(extra)
    return env


@dataclass
class Served:
    """A served controller: its URL, API tokens, log file, and the CLI's environment."""

    url: str
    tokens: tuple[str, ...]
    process: subprocess.Popen[bytes]
    log_path: Path
    data_dir: Path
    catalog_dir: Path
    cli_env: dict[str, str] = field(default_factory=dict)
    serve_command: list[str] = field(default_factory=list)
    serve_env: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        """Stop the controller (SIGTERM, as Kubernetes does); its sandboxes go on."""
        _stop(self.process)

    def start_again(self) -> None:
        """Start the controller again on the same port, database and data dir."""
        assert self.process.poll() is not None, "stop it first"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.serve_command, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=self.serve_env, start_new_session=True,
            )
        _wait_healthy(self)

    @property
    def token(self) -> str:
        return self.tokens[0]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=30)

    def remote(self, *args: str) -> list[str]:
        """`--server URL --token-file F` (the token in a 0600 file, never on a command
        line: `--token` warns), then ARGS."""
        token_file = self.log_path.with_name(f"token-{self.url.rsplit(':', 1)[1]}")
        if not token_file.exists():
            token_file.touch(mode=0o600)
            token_file.write_text(self.token + "\n")
        return ["--server", self.url, "--token-file", str(token_file), *args]

    def simplectl(
        self, *args: str, timeout: float = 90, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run `simplectl ARGS` to its end (ARGS name the server: see `remote`)."""
        return subprocess.run(
            [*SIMPLECTL, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.cli_env, **(env or {})},
            stdin=subprocess.DEVNULL,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def runs(self) -> list[dict[str, Any]]:
        with self.client() as http:
            response = http.get("/v1/runs", params={"limit": 500})
        response.raise_for_status()
        return list(response.json()["runs"])

    def wait_run(self, run_id: str, timeout_s: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        run: dict[str, Any] = {}
        with self.client() as http:
            while time.monotonic() < deadline:
                run = http.get(f"/v1/runs/{run_id}").json()
                if run["status"] in FINAL:
                    return run
                time.sleep(0.1)
        raise AssertionError(f"run {run_id} did not end within {timeout_s} s: {run}")


def _wait_healthy(served: Served) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if served.process.poll() is not None:
            raise RuntimeError(
                f"simplectl serve exited with {served.process.returncode}:\n{served.log()}"
            )
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{served.url}/healthz", timeout=1).status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError(f"simplectl serve did not answer /healthz:\n{served.log()}")


def _end_runs(served: Served, timeout_s: float = 20) -> None:
    """Cancel what a failed test left running, and wait for every run to end."""
    with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
        deadline = time.monotonic() + timeout_s
        with served.client() as http:
            while time.monotonic() < deadline:
                active = [r for r in served.runs() if r["status"] not in FINAL]
                if not active:
                    return
                for run in active:
                    if not run["cancel_requested"]:
                        http.post(f"/v1/runs/{run['run_id']}/cancel")
                time.sleep(0.2)


def _kill_sandboxes(data_dir: Path) -> None:
    """Kill sandbox process groups (and their supervisors) that outlived the server."""
    for attempt in (data_dir / "sandboxes").glob("*/attempt-*"):
        if (attempt / "exit.json").exists():
            continue
        for name, key in (("child.json", "pgid"), ("supervisor.json", "pid")):
            with contextlib.suppress(OSError, ValueError, KeyError):
                group = int(json.loads((attempt / name).read_text())[key])
                os.killpg(group, signal.SIGKILL)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


ServeFactory = Callable[..., Served]


@pytest.fixture
def ci_catalog(tmp_path: Path, catalog_dir: Callable[..., Path]) -> Path:
    """The directory of the `ci` catalog (and of the scripts its own sandboxes run)."""
    scripts = {"token_script": TOKEN_SCRIPT, "garbled_script": GARBLED_SCRIPT}
    text = CATALOG
    for name, source in scripts.items():
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        text = text.replace("{" + name + "}", json.dumps(str(path)))
    return catalog_dir(text, "ci.yaml")


@pytest.fixture
def serve(settings: Settings, tmp_path: Path, ci_catalog: Path) -> Iterator[ServeFactory]:
    """Start `simplectl serve` (once per test); keyword arguments add SIMPLE_* variables."""
    started: list[Served] = []
    catalog = ci_catalog

    def start(**extra_env: str) -> Served:
        tokens = (f"ci-{secrets.token_hex(16)}", f"other-{secrets.token_hex(16)}")
        port = free_port()
        log_path = tmp_path / f"serve-{port}.log"
        env = clean_env(
            SIMPLE_DATA_DIR=str(settings.data_dir),
            SIMPLE_DATABASE_URL=settings.resolved_database_url,
            SIMPLE_API_TOKENS=f"{tokens[0]}, {tokens[1]}",
            SIMPLE_CATALOG_DIRS=str(catalog),
            SIMPLE_RETRY_BASE_S=str(settings.retry_base_s),
            SIMPLE_RETRY_MAX_S=str(settings.retry_max_s),
            SIMPLE_RECONCILE_INTERVAL_S=str(settings.reconcile_interval_s),
            SIMPLE_LOST_GRACE_S=str(settings.lost_grace_s),
            SIMPLE_PROCESS_USER=settings.process_user,  # "self" unless a test says (conftest)
            PYTHONUNBUFFERED="1",
        )
        if settings.process_python:
            env["SIMPLE_PROCESS_PYTHON"] = settings.process_python
        env.update(extra_env)
        command = [*SIMPLECTL, "serve", "--host", "127.0.0.1", "--port", str(port)]
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own group: a signal meant for it spares pytest
            )
        served = Served(
            url=f"http://127.0.0.1:{port}",
            tokens=tokens,
            process=process,
            log_path=log_path,
            data_dir=settings.data_dir,
            catalog_dir=catalog,
            # If a command fell back to the embedded controller, it would use this
            # empty data dir, not the server's, and the test would notice.
            cli_env=clean_env(SIMPLE_DATA_DIR=str(tmp_path / "cli-data")),
            serve_command=command,
            serve_env=env,
        )
        started.append(served)
        _wait_healthy(served)
        return served

    yield start
    for served in started:
        if served.process.poll() is None:
            _end_runs(served)
        _stop(served.process)
        _kill_sandboxes(served.data_dir)
    # what a killed sandbox left in its working directory (outside tmp_path)
    shutil.rmtree(Path(tempfile.gettempdir()) / f"simple-work-{settings.controller_id}",
                  ignore_errors=True)  # fmt: skip


@pytest.fixture
def served(serve: ServeFactory) -> Served:
    """A served controller with API tokens and the `ci` catalog."""
    return serve()
