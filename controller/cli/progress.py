"""Live progress of a run on stderr: a bar per sandbox on a terminal, a line per change in CI."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

FINAL_RUN = {"succeeded", "failed", "cancelled", "budget_exceeded"}
POLL_S = 0.25

Fetch = Callable[[], dict[str, Any]]


def follow_run(
    fetch: Fetch, stream: TextIO | None = None, poll_s: float = POLL_S
) -> dict[str, Any]:
    """Poll the run until it ends, showing progress; returns the final run."""
    stream = stream or sys.stderr
    if stream.isatty():
        return _follow_bars(fetch, stream, poll_s)
    return _follow_lines(fetch, stream, poll_s)


def _describe(sandbox: dict[str, Any]) -> str:
    step = sandbox.get("step")
    total = sandbox.get("steps_total")
    where = f" step {step}/{total}" if step is not None and total else ""
    attempt = f" attempt {sandbox['attempts']}" if sandbox.get("attempts", 0) > 1 else ""
    cost = f" ${sandbox['cost_usd']:.2f}" if sandbox.get("cost_usd") else ""
    error = (
        f" ({sandbox['error']})" if sandbox.get("error") and sandbox["status"] != "running" else ""
    )
    return f"{sandbox['status']}{where}{attempt}{cost}{error}"


def _follow_lines(fetch: Fetch, stream: TextIO, poll_s: float) -> dict[str, Any]:
    shown: dict[str, str] = {}
    run_status = None
    while True:
        run = fetch()
        if run["status"] != run_status:
            run_status = run["status"]
            print(f"run {run['run_id']}: {run_status}", file=stream, flush=True)
        for sandbox in run["sandboxes"]:
            line = _describe(sandbox)
            if shown.get(sandbox["sandbox_id"]) != line:
                shown[sandbox["sandbox_id"]] = line
                print(f"  {sandbox['template_id']}: {line}", file=stream, flush=True)
        if run["status"] in FINAL_RUN:
            return run
        time.sleep(poll_s)


def _follow_bars(fetch: Fetch, stream: TextIO, poll_s: float) -> dict[str, Any]:
    console = Console(file=stream)
    columns = (
        TextColumn("{task.description:<40}"),
        BarColumn(),
        TextColumn("{task.fields[state]}"),
    )
    tasks: dict[str, TaskID] = {}
    with Progress(*columns, console=console, transient=False) as progress:
        while True:
            run = fetch()
            for sandbox in run["sandboxes"]:
                sid = sandbox["sandbox_id"]
                if sid not in tasks:
                    tasks[sid] = progress.add_task(sandbox["template_id"][:40], total=1, state="")
                total = sandbox.get("steps_total") or 1
                done = (
                    total
                    if sandbox["status"] not in ("pending", "running")
                    else (sandbox.get("step") or 0)
                )
                progress.update(tasks[sid], total=total, completed=done, state=_describe(sandbox))
            if run["status"] in FINAL_RUN:
                return run
            time.sleep(poll_s)
