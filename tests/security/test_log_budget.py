"""Issue 25, finding 1: a sandbox's output had no bound on any backend.

Measured on main 738f0bb: a sandbox that printed 900 MB (most of it one line) raised the
controller's peak memory by 903 MB, its data directory held 900 MB afterwards, `GET
…/logs` answered 900 MB, and following re-read the whole file every 0.5 s per viewer.
Now the process supervisor writes through the log budget (SIMPLE_LOG_BUDGET: head and
tail kept, the middle counted), archiving and serving stream a chunk at a time, and
followers read from their offset.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.ci.conftest import CATALOG, Served, ServeFactory
from tests.e2e_helpers import wait_for
from tests.security.conftest import HOSTILE_CATALOG, SCRIPTS
from tests.security.test_bodies import vm_hwm_kib

MIB = 1 << 20
FLOOD_BYTES = 1 << 30  # 1 GiB, as the issue asks: about 10 s through the supervisor here
BUDGET = 16 * MIB  # the default SIMPLE_LOG_BUDGET

# Writes config.bytes to stdout as fast as Python can (one line, mostly), then the end.
FLOOD_SCRIPT = """
import json, os, sys, time
config = json.loads(os.environ["SIMPLE_TEMPLATE_CONFIG"])
out = sys.stdout.buffer
out.write(b"FLOOD START\\n")
block = b"x" * (1 << 20)
for _ in range(config["bytes"] >> 20):
    out.write(block)
out.write(b"\\nFLOOD END\\n")
out.flush()
for i in range(config.get("ticks", 0)):  # then a line every 0.1 s (followers wait on them)
    time.sleep(0.1)
    out.write(b"TICK %d\\n" % i)
    out.flush()
"""

SHORT_SCRIPT = """
print("short and sweet", flush=True)
"""

BUDGET_CATALOG = """
  - id: flood
    category: hostile
    description: prints config.bytes to stdout as fast as it can
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 300
    command: [python, {flood_script}]
    config: {bytes: FLOOD_BYTES}
  - id: flood_ticks
    category: hostile
    description: prints 8 MiB, then a line every 0.1 s for a while
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 300
    command: [python, {flood_script}]
    config: {bytes: TICKS_BYTES, ticks: 600}
  - id: flood_stopped
    category: hostile
    description: prints 64 MiB; its template stops it past the log budget
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 300
    on_log_budget: stop
    command: [python, {flood_script}]
    config: {bytes: STOPPED_BYTES}
  - id: short
    category: hostile
    description: prints one line and exits
    estimate: {cost_usd: [0.0, 0.1], runtime_s: [1, 2]}
    timeout_s: 120
    command: [python, {short_script}]
""".replace("FLOOD_BYTES", str(FLOOD_BYTES)).replace("TICKS_BYTES", str(8 * MIB)).replace(
    "STOPPED_BYTES", str(64 * MIB))


@pytest.fixture
def ci_catalog(tmp_path: Path, catalog_dir: Callable[..., Path]) -> Path:
    """The hostile catalog plus the flooding templates (overrides the conftest's)."""
    extra = HOSTILE_CATALOG.lstrip("\n") + BUDGET_CATALOG.lstrip("\n")
    text = CATALOG.replace("suites:", extra + "suites:", 1)
    scripts = {**SCRIPTS, "flood_script": FLOOD_SCRIPT, "short_script": SHORT_SCRIPT}
    for name, source in scripts.items():
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        text = text.replace("{" + name + "}", json.dumps(str(path)))
    return catalog_dir(text, "ci.yaml")


def disk_bytes(directory: Path) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def run(served: Served, template: str) -> str:
    with served.client() as http:
        response = http.post("/v1/runs", json={"templates": [template]})
    assert response.status_code in (200, 201, 202), response.text
    return str(response.json()["run_id"])


def timed_run(served: Served, template: str) -> float:
    started = time.monotonic()
    assert served.wait_run(run(served, template), timeout_s=120)["status"] == "succeeded"
    return time.monotonic() - started


def only_sandbox(served: Served, run_id: str) -> dict:
    with served.client() as http:
        return dict(http.get(f"/v1/runs/{run_id}").json()["sandboxes"][0])


@pytest.mark.slow
def test_a_gigabyte_of_output_costs_the_controller_a_budget_not_a_gigabyte(
    serve: ServeFactory,
) -> None:
    served = serve()
    quiet_s = timed_run(served, "short")  # the routes warm, the neighbour's usual time
    before_kib = vm_hwm_kib(served.process.pid)
    disk_before = disk_bytes(served.data_dir)
    flood = run(served, "flood")
    flood_started = time.monotonic()
    neighbour_s = timed_run(served, "short")  # while the flood runs
    ended = served.wait_run(flood, timeout_s=240)
    flood_s = time.monotonic() - flood_started
    sandbox_id = only_sandbox(served, flood)["sandbox_id"]
    with served.client() as http:

        def archived() -> dict | None:
            detail = http.get(f"/v1/sandboxes/{sandbox_id}").json()
            return detail if detail.get("log_dropped_bytes") is not None else None

        detail = wait_for(archived, timeout_s=60, what="the archived log's dropped count")
        with http.stream("GET", f"/v1/sandboxes/{sandbox_id}/logs") as response:
            assert response.status_code == 200
            logs = b"".join(response.iter_bytes())
        page = http.get(f"/sandboxes/{sandbox_id}").text
    grown_mib = (vm_hwm_kib(served.process.pid) - before_kib) / 1024
    disk_mib = (disk_bytes(served.data_dir) - disk_before) / MIB
    print(f"flood {flood_s:.1f} s; controller peak +{grown_mib:.1f} MiB; data dir "
          f"+{disk_mib:.1f} MiB; neighbour {neighbour_s:.1f} s (alone {quiet_s:.1f} s)")
    assert ended["status"] == "succeeded"  # past its budget, it kept running to its end
    assert grown_mib < 40, f"the controller's peak memory grew by {grown_mib:.0f} MiB"
    assert disk_mib < 40, f"the data directory grew by {disk_mib:.0f} MiB"
    written = FLOOD_BYTES + len(b"FLOOD START\n\nFLOOD END\n")
    assert len(logs) <= BUDGET + 100
    assert logs.startswith(b"FLOOD START\n") and logs.endswith(b"\nFLOOD END\n")
    dropped = detail["log_dropped_bytes"]
    assert dropped == written - len(logs) + len(f"\n[… {dropped} bytes dropped by SIMPLE's "
                                                 "log budget …]\n".encode())
    assert f"[… {dropped} bytes dropped by SIMPLE's log budget …]".encode() in logs
    assert "Output truncated by the log budget" in page
    assert neighbour_s < quiet_s + 15, f"the neighbour took {neighbour_s:.1f} s"


def test_a_template_may_stop_a_sandbox_past_its_budget(serve: ServeFactory) -> None:
    served = serve(SIMPLE_LOG_BUDGET=str(MIB))
    ended = served.wait_run(run(served, "flood_stopped"), timeout_s=120)
    assert ended["status"] == "failed"
    sandbox = only_sandbox(served, ended["run_id"])
    assert "its output passed SIMPLE_LOG_BUDGET" in sandbox["error"]
    assert sandbox["attempts"] == 1  # not retried: it would flood again
    sandbox_id = sandbox["sandbox_id"]
    with served.client() as http:
        logs = http.get(f"/v1/sandboxes/{sandbox_id}/logs").content
    assert b"simple: stopped: its output passed the sandbox's log budget" in logs
    assert len(logs) <= MIB + 200


def proc_io(pid: int) -> dict[str, int]:
    fields = (line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return {key: int(value) for key, value in fields}


def test_following_reads_what_is_new_not_the_whole_log_again(serve: ServeFactory) -> None:
    """Two followers of a sandbox that printed 8 MiB and then a line every 0.1 s: while
    twenty more lines come, the controller reads kilobytes (its database pages, the new
    lines), not 8 MiB per follower per poll (/proc/PID/io's rchar)."""
    served = serve()
    run_id = run(served, "flood_ticks")
    sandbox_id = wait_for(
        lambda: only_sandbox(served, run_id)["sandbox_id"]
        if only_sandbox(served, run_id)["status"] == "running" else None,
        timeout_s=60, what="the sandbox running",
    )
    url = f"{served.url}/v1/sandboxes/{sandbox_id}/logs"
    with httpx.Client(headers=served.headers, timeout=60) as one, \
            httpx.Client(headers=served.headers, timeout=60) as two, \
            one.stream("GET", url, params={"follow": "true"}) as first, \
            two.stream("GET", url, params={"follow": "true"}) as second:
        streams = [first.iter_bytes(), second.iter_bytes()]
        seen = [b"", b""]

        def read_until(marker: bytes) -> None:
            for i, stream in enumerate(streams):
                while marker not in seen[i]:
                    seen[i] += next(stream)

        read_until(b"TICK 2\n")  # the 8 MiB once, and the first ticks
        with served.client() as http:  # the latest line written (not the latest delivered)
            written = http.get(f"/v1/sandboxes/{sandbox_id}/logs").content
        last = max(int(t) for t in re.findall(rb"TICK (\d+)\n", written))
        before = proc_io(served.process.pid)["rchar"]
        read_until(b"TICK %d\n" % (last + 20))  # two seconds more: four polls per follower
        read_mib = (proc_io(served.process.pid)["rchar"] - before) / MIB
    assert all(s.startswith(b"FLOOD START\n") and b"FLOOD END\n" in s for s in seen)
    assert all(len(s) < 8 * MIB + 4096 for s in seen)  # each byte sent once
    print(f"the controller read {read_mib:.2f} MiB while twenty lines came")
    assert read_mib < 4, f"the controller read {read_mib:.1f} MiB for twenty lines"
    with served.client() as http:
        http.post(f"/v1/runs/{run_id}/cancel")
    served.wait_run(run_id, timeout_s=60)
