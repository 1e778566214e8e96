"""What a test session must not leave behind (issue 28): SIMPLE-labelled containers, sandbox
processes, `simple-work-*` directories made during the session. Checked once, by the main
process, after every test (and every xdist worker) has ended."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from sandbox_image.contract import LABEL_MANAGED_BY, LABEL_MANAGED_BY_VALUE

SETTLE_S = 15.0  # sandboxes stopped by the last tests may still be exiting


def _containers(since: float) -> list[str]:
    try:
        from docker.client import DockerClient

        client = DockerClient.from_env(timeout=10)
        found = client.containers.list(
            all=True, ignore_removed=True,
            filters={"label": f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}"})
        names = [f"container {c.name}" for c in found
                 if _epoch(c.attrs.get("Created", "")) >= since]
        client.close()
        return names
    except Exception:  # no engine here: nothing of ours can be on it
        return []


def _epoch(created: str) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(created[:26].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return float("inf")  # unreadable: counted


def _processes(since: float) -> list[str]:
    """Processes carrying a sandbox's contract (SIMPLE_SANDBOX_ID), started this session."""
    found = []
    boot = _boot_time()
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            started = boot + int((entry / "stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
        except (OSError, ValueError, IndexError):
            continue
        if b"SIMPLE_SANDBOX_ID=" in environ and started >= since:
            found.append(f"process {entry.name} ({cmdline.strip()})")
    return found


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def _directories(since: float) -> list[str]:
    return [f"directory {p}" for p in Path(tempfile.gettempdir()).glob("simple-work-*")
            if p.is_dir() and p.stat().st_mtime >= since]


def leftovers(since: float, settle_s: float = SETTLE_S) -> list[str]:
    """What the session left, after giving the last sandboxes time to exit."""
    deadline = time.monotonic() + settle_s
    while True:
        left = _containers(since) + _processes(since) + _directories(since)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)
