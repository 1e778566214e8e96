"""What every bench script needs, written once: catalogs of no-op templates, a served
controller in a child process, runs started and waited for over HTTP, containers found by
label, and the figures (medians, p99, epoch seconds) the reports print.

Run a bench from the checkout's root as a module, `python -m bench.<name>` (the Makefile's
`bench-*` targets do), so `bench`, `controller` and `tests` import without path tricks.
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
FINAL = frozenset({"succeeded", "failed", "cancelled", "budget_exceeded"})
NOOP = ["python", "-S", "-c", "pass"]


def noop_template(template_id: str, category: str, **fields: Any) -> dict[str, Any]:
    """One free, one-second template running `NOOP`; `fields` override or add keys."""
    template: dict[str, Any] = {
        "id": template_id,
        "category": category,
        "estimate": {"cost_usd": [0.0, 0.0], "runtime_s": [1, 1]},
        "timeout_s": 300,
        "command": NOOP,
    }
    template.update(fields)
    return template


def write_catalog(
    directory: Path,
    templates: Sequence[dict[str, Any]],
    suites: dict[str, list[str]] | None = None,
    items: Iterable[dict[str, Any]] | None = None,
    name: str = "bench.yaml",
) -> list[str]:
    """A catalog file of `templates` (and `suites`) in `directory`, with an `items.jsonl`
    beside it when `items` are given; the template ids, in order."""
    directory.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {"templates": list(templates)}
    if suites:
        document["suites"] = suites
    (directory / name).write_text(yaml.safe_dump(document))
    if items is not None:
        import json

        (directory / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    return [t["id"] for t in templates]


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, child: subprocess.Popen[Any] | None = None,
                 timeout_s: float = 60, path: str = "/healthz") -> None:
    """Until `url` + `path` answers 200; fails early if `child` (the server) exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child is not None and child.poll() is not None:
            raise RuntimeError(f"the bench server exited with {child.returncode}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}{path}", timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"the bench server at {url} did not answer within {timeout_s:.0f} s")


@contextlib.contextmanager
def served(argv: Sequence[str], port: int, log: Path | None = None) -> Iterator[str]:
    """A server child process (`argv`, listening on `port`); its base URL while it runs,
    stopped with SIGINT (then killed) afterwards."""
    out = log.open("w") if log else subprocess.DEVNULL
    child = subprocess.Popen(list(argv), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, child)
        yield url
    finally:
        child.send_signal(2)  # SIGINT: uvicorn shuts down cleanly
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=30)
        if log:
            out.close()  # type: ignore[union-attr]


def serve_argv(*args: str) -> list[str]:
    """`simplectl serve` from this interpreter's environment, with `args`."""
    return [sys.executable, "-m", "controller.cli", "serve", *args]


def start_run(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> str:
    """POST /v1/runs; the new run's id."""
    response = httpx.post(f"{url}/v1/runs", json=body, headers=headers or {}, timeout=30)
    if response.status_code != 201:
        raise RuntimeError(f"starting a run failed: {response.status_code} {response.text}")
    return str(response.json()["run_id"])


def wait_finished(url: str, run_id: str, timeout_s: float = 900,
                  poll_s: float = 0.25) -> dict[str, Any]:
    """The run once it has ended, polled gently over one connection (a busy poller would
    steal CPU from the controller it measures)."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=30) as client:
        while time.monotonic() < deadline:
            run = client.get(f"{url}/v1/runs/{run_id}").json()
            if run["status"] in FINAL:
                return dict(run)
            time.sleep(poll_s)
    raise TimeoutError(f"run {run_id} did not finish within {timeout_s:.0f} s")


def remove_labelled(client: Any, label: str) -> int:
    """Force-remove every container carrying `label` (`key=value`); how many there were."""
    from docker.errors import APIError, NotFound

    leftovers = client.containers.list(all=True, ignore_removed=True, filters={"label": label})
    for container in leftovers:
        with contextlib.suppress(NotFound, APIError):
            container.remove(force=True)
    return len(leftovers)


def epoch_seconds(iso: str) -> float:
    """Epoch seconds of an API time (UTC, with or without an offset)."""
    moment = datetime.fromisoformat(iso)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def median_ms(values: Iterable[float]) -> float:
    """The median of `values` (seconds) in milliseconds; NaN for none."""
    values = list(values)
    return statistics.median(values) * 1000 if values else float("nan")


def p99_ms(values: Sequence[float]) -> float:
    """The 99th percentile of `values` (seconds) in milliseconds; NaN under two values."""
    return statistics.quantiles(values, n=100)[98] * 1000 if len(values) > 1 else float("nan")


def machine() -> str:
    """Where a bench ran, for its header: cores, load, Python, platform."""
    import os
    import platform

    return (f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, Python "
            f"{platform.python_version()}, {platform.system()} {platform.release()}")
