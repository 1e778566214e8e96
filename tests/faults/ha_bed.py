"""The high-availability bed: two reconcilers and two API replicas (`simplectl serve
--role …`) on one PostgreSQL database and one data directory, behind a real HAProxy, on
the process backend (quick) or Docker (`backend="docker"`, containers on the host network).

Clients and sandboxes reach the API only through the load balancer. `Poller` is a CI
client reading the run through it all along and counting every answer that was not 200.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.faults.conftest import catalog_yaml
from tests.services import free_port

SIMPLECTL = [sys.executable, "-m", "controller.cli"]
LEASE_S = 3.0  # short leases: takeovers within seconds
RENEW_DEADLINE_S = 2.0
RETRY_S = 0.5

HAPROXY_CFG = """\
global
    maxconn 4000
defaults
    mode http
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    timeout queue 10s
    timeout check 5s
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response response-timeout 503
frontend simple
    bind 127.0.0.1:{port}
    default_backend api
backend api
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 500ms fall 3 rise 1
{servers}
"""


def haproxy_binary() -> str | None:
    return shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)


@dataclass
class Server:
    """One `simplectl serve --role ROLE` process."""

    name: str
    role: str
    port: int
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [*SIMPLECTL, "serve", "--role", self.role, "--port", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**self.env, "SIMPLE_HOLDER_ID": self.name})

    def wait_healthy(self, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited:\n{self.output()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not become ready:\n{self.output()}")

    def leader(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/readyz", timeout=2).json()["leader"])

    def leading(self) -> bool:
        with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
            return bool(self.leader()["leading"])
        return False

    def metric(self, name: str) -> float:
        from prometheus_client.parser import text_string_to_metric_families

        page = httpx.get(f"{self.url}/metrics", timeout=5).text
        return sum(s.value for f in text_string_to_metric_families(page) for s in f.samples
                   if s.name == name)

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def kill_9(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=20)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGCONT)  # a paused one must hear the TERM
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@dataclass
class Poller:
    """A CI client polling the run through the load balancer; any non-200 is an error."""

    url: str
    run_id: str
    answers: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._poll, name="poller", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                try:
                    got = client.get(f"{self.url}/v1/runs/{self.run_id}")
                    self.answers += 1
                    if got.status_code != 200:
                        self.errors.append(f"{got.status_code}: {got.text[:200]}")
                except httpx.HTTPError as e:
                    self.errors.append(f"{type(e).__name__}: {e}")
                self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=40)


@dataclass
class HaBed:
    """Two reconcilers, two API replicas, HAProxy, one database, one data directory."""

    database_url: str
    root: Path
    count: int
    config: dict[str, Any]
    backend: str = "process"
    reconcilers: list[Server] = field(default_factory=list)
    apis: list[Server] = field(default_factory=list)
    lb_port: int = 0
    lb: subprocess.Popen[bytes] | None = None
    run_ids: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.lb_port}"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def start(self) -> None:
        catalog = self.root / "catalog"
        catalog.mkdir(exist_ok=True)
        (catalog / "ha.yaml").write_text(catalog_yaml(self.config, count=self.count))
        self.lb_port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
        env.update(
            SIMPLE_DATA_DIR=str(self.data_dir), SIMPLE_DATABASE_URL=self.database_url,
            SIMPLE_CONTROLLER_URL=self.url, SIMPLE_CATALOG_DIRS=str(catalog),
            SIMPLE_RECONCILE_INTERVAL_S="0.5", SIMPLE_LOST_GRACE_S="60",
            SIMPLE_RETRY_BASE_S="0.2", SIMPLE_RETRY_MAX_S="1", SIMPLE_PROCESS_USER="self",
            SIMPLE_LEASE_DURATION_S=str(LEASE_S),
            SIMPLE_LEASE_RENEW_DEADLINE_S=str(RENEW_DEADLINE_S),
            SIMPLE_LEASE_RETRY_S=str(RETRY_S), PYTHONUNBUFFERED="1",
            SIMPLE_BACKEND=self.backend, SIMPLE_DOCKER_NETWORK="host")
        for n in (1, 2):
            self.reconcilers.append(Server(f"rec{n}", "reconciler", free_port(), env,
                                           self.root / f"rec{n}.log"))
            self.apis.append(Server(f"api{n}", "api", free_port(), env,
                                    self.root / f"api{n}.log"))
        first, *others = [*self.reconcilers, *self.apis]
        first.start()  # it migrates; the others then start on a migrated database
        first.wait_healthy()
        for server in others:
            server.start()
        for server in others:
            server.wait_healthy()
        self._start_lb()

    def _start_lb(self) -> None:
        binary = haproxy_binary()
        assert binary, "haproxy is not installed (apt-get install -y haproxy)"
        servers = "\n".join(f"    server {s.name} 127.0.0.1:{s.port} check" for s in self.apis)
        config = self.root / "haproxy.cfg"
        config.write_text(HAPROXY_CFG.format(port=self.lb_port, servers=servers))
        with (self.root / "haproxy.log").open("ab") as out:
            self.lb = subprocess.Popen([binary, "-db", "-f", str(config)], stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise AssertionError("haproxy did not answer")

    def leader(self, timeout_s: float = 20) -> Server:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leading = [s for s in self.reconcilers if s.leading()]
            if len(leading) == 1:
                return leading[0]
            time.sleep(0.05)
        raise AssertionError("no single leader:\n" + self.output())

    def start_run(self, max_parallel: int) -> str:
        names = [f"burst_{n:02d}" for n in range(self.count)]
        made = httpx.post(f"{self.url}/v1/runs", json={"templates": names,
                                                       "max_parallel": max_parallel},
                          headers={"Idempotency-Key": "ha-run"}, timeout=60)
        assert made.status_code == 201, made.text
        self.run_ids.append(str(made.json()["run_id"]))
        return self.run_ids[-1]

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/v1/runs/{run_id}", timeout=30).json())

    def wait_running(self, run_id: str, count: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                if sum(s["status"] == "running" and (s.get("step") or 0) >= 1
                       for s in self.run(run_id)["sandboxes"]) >= count:
                    return
            time.sleep(0.2)
        raise AssertionError(f"{count} sandboxes of {run_id} were not running in time")

    def wait_run(self, run_id: str, timeout_s: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        run: dict[str, Any] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                run = self.run(run_id)
                if run.get("status") in ("succeeded", "failed", "cancelled", "budget_exceeded"):
                    return run
            time.sleep(0.5)
        raise AssertionError(f"run {run_id} did not end: {run}\n{self.output()}")

    def output(self) -> str:
        return "\n".join(f"--- {s.name}\n{s.output()}" for s in [*self.reconcilers, *self.apis])

    def stop(self) -> None:
        for server in [*self.apis, *self.reconcilers]:
            server.stop()
        if self.lb is not None and self.lb.poll() is None:
            self.lb.terminate()
            self.lb.wait(timeout=10)
        stop_sandboxes(self.data_dir)
        if self.backend == "docker":
            for container in self.containers():
                with contextlib.suppress(Exception):
                    container.remove(force=True)

    def containers(self) -> list[Any]:
        """The containers of this bed's runs (Docker backend)."""
        from sandbox_image.contract import LABEL_RUN_ID
        from tests.docker_support import connect_docker

        client = connect_docker()
        try:
            return [c for run_id in self.run_ids for c in client.containers.list(
                all=True, ignore_removed=True, filters={"label": f"{LABEL_RUN_ID}={run_id}"})]
        finally:
            client.close()


def stop_sandboxes(data_dir: Path) -> None:
    """Kill whatever sandbox is still running (a failed case must leave no process)."""
    import json

    for found in (data_dir / "sandboxes").glob("*/attempt-*/supervisor.json"):
        if (found.parent / "exit.json").exists():
            continue
        with contextlib.suppress(OSError, ValueError, KeyError, ProcessLookupError):
            pid = int(json.loads(found.read_text())["pid"])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if pid > 0 and b"supervisor" in cmdline:  # not a pid reused by someone else
                os.kill(pid, signal.SIGTERM)
