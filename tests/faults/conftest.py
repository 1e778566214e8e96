"""The fault suite's harness: a served controller on Docker, PostgreSQL and S3, 16 sandboxes.

`make faults` (SIMPLE_FAULTS=1) runs the Docker cases and the lifecycle machine; `make test`
runs only the checker's own tests. Each case records
what it broke and what held; the summary prints one line per case and
`faults: N/N held`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faults.checker import Evidence, Verdict, check, gather

RUN_DOCKER_CASES = os.environ.get("SIMPLE_FAULTS", "") == "1"
collect_ignore = [] if RUN_DOCKER_CASES else ["test_faults.py", "test_lifecycle.py", "test_ha.py"]

SIMPLECTL = [sys.executable, "-m", "controller.cli"]
SANDBOXES = 16
_lines: dict[str, str] = {}
_held: dict[str, bool] = {}


def record_case(request: pytest.FixtureRequest, text: str) -> None:
    """What this case broke and what held (the line the summary prints)."""
    _lines[request.node.nodeid] = text


_cases: set[str] = set()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("faults") is not None:  # the cases, not the checker's tests
        _cases.add(item.nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.nodeid not in _cases:
        return
    ok = _held.get(report.nodeid, True) and not report.failed
    if report.when == "call" or report.failed:
        _held[report.nodeid] = ok


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _held:
        return
    terminalreporter.write_line("")
    for nodeid, ok in _held.items():
        name = nodeid.rpartition("::")[2]
        text = _lines.get(nodeid, "")
        terminalreporter.write_line(f"fault {name}: {'held' if ok else 'NOT HELD'}: {text}")
    terminalreporter.write_line(f"faults: {sum(_held.values())}/{len(_held)} held")


def catalog_yaml(config: dict[str, Any], count: int = SANDBOXES,
                 command: list[str] | None = None) -> str:
    """`count` templates burst_00.. running the built-in runtime with `config` (or
    `command` instead of the image's own)."""
    import json

    lines = ["templates:"]
    for n in range(count):
        lines += [
            f"  - id: burst_{n:02d}",
            "    category: faults",
            "    mechanisms: [M1]",
            "    estimate: {cost_usd: [0.01, 0.02], runtime_s: [5, 20]}",
            "    timeout_s: 300",
            "    resources: {cpu: 250m, memory: 256Mi}",
            f"    config: {json.dumps(config)}",
        ]
        if command:
            lines.append(f"    command: {json.dumps(command)}")
    return "\n".join(lines) + "\n"


@dataclass
class FaultController:
    """`simplectl serve --backend docker` on PostgreSQL and S3, restartable, killable."""

    env: dict[str, str]
    port: int
    log_dir: Path
    process: subprocess.Popen[bytes] | None = None
    generation: int = 0
    run_ids: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ready_timeout_s: float = 90) -> None:
        self.generation += 1
        log = (self.log_dir / f"controller-{self.generation}.log").open("wb")
        self.process = subprocess.Popen(
            [*SIMPLECTL, "serve", "--backend", "docker", "--port", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env)
        log.close()
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the controller exited:\n{self.output()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"the controller did not start:\n{self.output()}")

    def freeze(self, seconds: float) -> None:
        """SIGSTOP for `seconds`, then SIGCONT: there but answering nothing meanwhile."""
        import signal

        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            self.process.send_signal(signal.SIGCONT)

    def kill_9(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=20)

    def output(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in sorted(self.log_dir.glob("controller-*.log")))

    def start_run(self, **body: Any) -> str:
        names = [f"burst_{n:02d}" for n in range(SANDBOXES)]
        response = httpx.post(f"{self.url}/v1/runs", json={"templates": names,
                                                           "max_parallel": SANDBOXES, **body},
                              timeout=60)
        assert response.status_code == 201, response.text
        run_id = str(response.json()["run_id"])
        self.run_ids.append(run_id)
        return run_id

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/v1/runs/{run_id}", timeout=30).json())

    def wait_run(self, run_id: str, timeout_s: float = 240) -> dict[str, Any]:
        final = {"succeeded", "failed", "cancelled", "budget_exceeded"}
        deadline = time.monotonic() + timeout_s
        run: dict[str, Any] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                run = self.run(run_id)
                if run.get("status") in final:
                    return run
            time.sleep(0.5)
        raise AssertionError(f"run {run_id} did not end: {run}\n{self.output()}")

    def wait_running(self, run_id: str, count: int = SANDBOXES, timeout_s: float = 300) -> None:
        """Until `count` sandboxes run and have reported progress (their events flow)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                sandboxes = self.run(run_id)["sandboxes"]
                if sum(s["status"] == "running" and (s.get("step") or 0) >= 1
                       for s in sandboxes) >= count:
                    return
            time.sleep(0.2)
        raise AssertionError(f"{count} sandboxes of {run_id} were not emitting in time")

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples that carry `labels`, from GET /metrics."""
        from prometheus_client.parser import text_string_to_metric_families

        page = httpx.get(f"{self.url}/metrics", timeout=30).text
        return sum(s.value for f in text_string_to_metric_families(page) for s in f.samples
                   if s.name == name and labels.items() <= s.labels.items())

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@dataclass
class FaultBed:
    """Everything a case needs: the controller, the database, the store, the engine."""

    controller: FaultController
    database_url: str
    store_settings: Any
    docker: Any

    def containers(self, run_id: str) -> list[Any]:
        from sandbox_image.contract import LABEL_RUN_ID

        return list(self.docker.containers.list(
            all=True, ignore_removed=True, filters={"label": f"{LABEL_RUN_ID}={run_id}"}))

    def wait_containers(self, run_id: str, count: int = SANDBOXES,
                        timeout_s: float = 300) -> list[Any]:
        """The run's containers, once `count` of them are running."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            running = [c for c in self.containers(run_id) if c.status == "running"]
            if len(running) >= count:
                return running
            time.sleep(0.2)
        raise AssertionError(f"{count} containers of {run_id} were not running in time")

    def wait_no_containers(self, run_id: str, timeout_s: float = 60) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s and self.containers(run_id):
            time.sleep(0.1)
        return time.monotonic() - started

    def verdict(self, run_id: str, all_delivered: bool = True,
                senders: Mapping[tuple[str, int], Mapping[str, bool]] | None = None) -> Verdict:
        """The checker's verdict; `senders` adds outboxes kept outside the sandboxes (the
        overload case's senders), keyed like the sandboxes' own."""
        from controller.db.engine import create_db_engine
        from controller.store import create_store

        self.wait_no_containers(run_id)
        engine = create_db_engine(self.database_url)
        try:
            found, stored, terminal, without = gather(
                engine, create_store(self.store_settings), run_id)
        finally:
            engine.dispose()
        outboxes = {**found, **(senders or {})}
        without = [s for s in without if all(s != key[0] for key in outboxes)]
        return check(Evidence(outboxes, stored, terminal,
                              [f"burst_{n:02d}" for n in range(SANDBOXES)],
                              [c.name for c in self.containers(run_id)], without),
                     all_delivered=all_delivered)

    def remove_containers(self) -> None:
        for run_id in self.controller.run_ids:
            for container in self.containers(run_id):
                with contextlib.suppress(Exception):
                    container.remove(force=True)


def make_bed(settings: Any, database_url: str, s3: Any, docker: Any, tmp_path: Path,
             config: dict[str, Any], command: list[str] | None = None,
             **extra_env: str) -> FaultBed:
    from tests.services import free_port

    catalog = tmp_path / "faults-catalog"
    catalog.mkdir(exist_ok=True)
    (catalog / "faults.yaml").write_text(catalog_yaml(config, command=command))
    bucket = s3.create_bucket("simple-faults")
    prefix = "f-" + secrets.token_hex(4)
    store_settings = settings.model_copy(update={
        "database_url": database_url, **s3.settings_update(bucket, prefix)})
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    env.update(
        SIMPLE_DATA_DIR=str(settings.data_dir), SIMPLE_DATABASE_URL=database_url,
        SIMPLE_STORE_URL=f"s3://{bucket}/{prefix}", SIMPLE_S3_ENDPOINT_URL=s3.endpoint_url,
        SIMPLE_S3_ACCESS_KEY_ID=s3.access_key_id,
        SIMPLE_S3_SECRET_ACCESS_KEY=s3.secret_access_key,
        SIMPLE_DOCKER_NETWORK="host", SIMPLE_CONTROLLER_URL=f"http://127.0.0.1:{port}",
        SIMPLE_CATALOG_DIRS=str(catalog), SIMPLE_RECONCILE_INTERVAL_S="0.5",
        SIMPLE_RETRY_BASE_S="0.2", SIMPLE_RETRY_MAX_S="1", SIMPLE_LOST_GRACE_S="30",
        PYTHONUNBUFFERED="1", **extra_env)
    controller = FaultController(env, port, tmp_path)
    return FaultBed(controller, database_url, store_settings, docker)


@pytest.fixture(scope="session")
def fault_docker() -> Iterator[Any]:
    from tests.docker_support import connect_docker, ensure_sandbox_image

    client = connect_docker()
    ensure_sandbox_image(client)
    yield client
    client.close()
