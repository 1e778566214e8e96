"""Following a run to its end: live progress on stderr (a bar per sandbox on a terminal,
a line per change in CI), and the one "wait, cancel on Ctrl-C" loop of `run` and `ask`."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from controller.cli.common import err

if TYPE_CHECKING:
    from controller.cli.client import ApiClient

FINAL_RUN = {"succeeded", "failed", "cancelled", "budget_exceeded"}


def wait_for_run(client: ApiClient, run_id: str, quiet: bool = False) -> dict[str, Any]:
    """Follow the run's stream to its last state, showing progress unless `quiet`."""
    states = (
        data for kind, data in client.stream_events(f"/v1/runs/{run_id}/stream") if kind == "run"
    )
    return follow_run(states, io.StringIO() if quiet else None)


def wait_for_run_or_cancel(client: ApiClient, run_id: str) -> dict[str, Any]:
    """Follow the run to its end; on Ctrl-C cancel it and wait, quietly, until it ends."""
    try:
        return wait_for_run(client, run_id)
    except KeyboardInterrupt:
        err.print(f"cancelling run {run_id} …")
        client.post(f"/v1/runs/{run_id}/cancel")
        return wait_for_run(client, run_id, quiet=True)


def follow_run(states: Iterable[dict[str, Any]], stream: TextIO | None = None) -> dict[str, Any]:
    """Show each state of the run as it comes; returns the last one."""
    stream = stream or sys.stderr
    if stream.isatty():
        return _follow_bars(iter(states), stream)
    return _follow_lines(iter(states), stream)


def _describe(sandbox: dict[str, Any]) -> str:
    step, total = sandbox.get("step"), sandbox.get("steps_total")
    where = f" step {step}/{total}" if step is not None and total else ""
    attempt = f" attempt {sandbox['attempts']}" if sandbox.get("attempts", 0) > 1 else ""
    cost = f" ${sandbox['cost_usd']:.2f}" if sandbox.get("cost_usd") else ""
    ended = sandbox["status"] not in ("pending", "running")
    error = f" ({sandbox['error']})" if sandbox.get("error") and ended else ""
    return f"{sandbox['status']}{where}{attempt}{cost}{error}"


def _follow_lines(states: Iterator[dict[str, Any]], stream: TextIO) -> dict[str, Any]:
    """One plain line per change, for CI logs."""
    shown: dict[str, str] = {}
    shown_alerts: list[dict[str, Any]] = []
    run_status = None
    run: dict[str, Any] = {}
    for run in states:
        if run["status"] != run_status:
            run_status = run["status"]
            print(f"run {run['run_id']}: {run_status}", file=stream, flush=True)
        staged = bool(run.get("stages"))
        for alert in (run.get("alerts") or [])[len(shown_alerts):]:
            shown_alerts.append(alert)
            print(f"  ALERT: {alert['message']}", file=stream, flush=True)
        if run.get("hold_reason") and shown.get("hold") != run["hold_reason"]:
            shown["hold"] = run["hold_reason"]
            print(f"  held, {run['hold_reason']}: `simplectl confirm {run['run_id']}` goes on",
                  file=stream, flush=True)
        for sandbox in run["sandboxes"]:
            line = _describe(sandbox)
            if shown.get(sandbox["sandbox_id"]) != line:
                shown[sandbox["sandbox_id"]] = line
                where = f"[stage {sandbox.get('stage', 0)}] " if staged else ""
                print(f"  {where}{sandbox['template_id']}: {line}", file=stream, flush=True)
    return run


def _follow_bars(states: Iterator[dict[str, Any]], stream: TextIO) -> dict[str, Any]:
    """A progress bar per sandbox, redrawn in place."""
    columns = (
        TextColumn("{task.description:<40}"),
        BarColumn(),
        TextColumn("{task.fields[state]}"),
    )
    tasks: dict[str, TaskID] = {}
    run: dict[str, Any] = {}
    with Progress(*columns, console=Console(file=stream), transient=False) as progress:
        for run in states:
            for sandbox in run["sandboxes"]:
                sid = sandbox["sandbox_id"]
                if sid not in tasks:
                    tasks[sid] = progress.add_task(sandbox["template_id"][:40], total=1, state="")
                total = sandbox.get("steps_total") or 1
                running = sandbox["status"] in ("pending", "running")
                done = (sandbox.get("step") or 0) if running else total
                progress.update(tasks[sid], total=total, completed=done, state=_describe(sandbox))
    return run
