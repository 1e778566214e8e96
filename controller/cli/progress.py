"""Following a run to its end: live progress on stderr (a bar per sandbox on a terminal,
a line per change in CI), and what an interrupt (SIGINT, or SIGTERM as a CI runner
sends on cancel or timeout) does while waiting:

- a served run (`--server`) is cancelled, the server's answer printed, exit 4 at once
  (a CI runner gives seconds before SIGKILL); `--no-cancel-on-interrupt` leaves it
  going and exits 128 + the signal's number, saying so;
- the embedded controller's run is cancelled and waited for (its sandboxes are ours).
"""

from __future__ import annotations

import io
import json
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from controller.cli.common import Exit, err

if TYPE_CHECKING:
    from controller.cli.client import ApiClient

FINAL_RUN = {"succeeded", "failed", "cancelled", "budget_exceeded"}
INTERRUPTS = (signal.SIGINT, signal.SIGTERM)
CANCEL_ATTEMPTS = 3


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while following a run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def interrupts_raise() -> Iterator[None]:
    """Inside: SIGINT and SIGTERM raise Interrupted; the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only
        return

    def raise_interrupted(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signum)

    previous = {number: signal.signal(number, raise_interrupted) for number in INTERRUPTS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextmanager
def interrupts_ignored() -> Iterator[None]:
    """A second Ctrl-C or SIGTERM must not cut the cancel request short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, signal.SIG_IGN) for number in INTERRUPTS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def wait_for_run(client: ApiClient, run_id: str, quiet: bool = False) -> dict[str, Any]:
    """Follow the run's stream to its last state, showing progress unless `quiet`."""
    states = (
        data for kind, data in client.stream_events(f"/v1/runs/{run_id}/stream") if kind == "run"
    )
    return follow_run(states, io.StringIO() if quiet else None)


def wait_for_run_or_cancel(client: ApiClient, run_id: str) -> dict[str, Any]:
    """Follow the embedded controller's run to its end; on SIGINT/SIGTERM cancel it and
    wait, quietly, until it ends (its sandboxes end with this process)."""
    try:
        with interrupts_raise():
            return wait_for_run(client, run_id)
    except KeyboardInterrupt:
        err.print(f"cancelling run {run_id} …")
        with interrupts_ignored():
            client.post(f"/v1/runs/{run_id}/cancel")
            return wait_for_run(client, run_id, quiet=True)


def wait_for_served_run(
    client: ApiClient, run_id: str, cancel_on_interrupt: bool = True, as_json: bool = False
) -> dict[str, Any]:
    """Follow a served run to its end. On SIGINT/SIGTERM: cancel it, print the answer
    (JSON on stdout with `as_json`) and exit 4 — or, when told not to cancel, say the run
    goes on and exit 128 + the signal."""
    try:
        with interrupts_raise():
            return wait_for_run(client, run_id)
    except KeyboardInterrupt as e:
        signum = e.signum if isinstance(e, Interrupted) else int(signal.SIGINT)
        name = signal.Signals(signum).name
        if not cancel_on_interrupt:
            err.print(
                f"{name}: run {run_id} goes on (--no-cancel-on-interrupt); "
                f"`simplectl cancel {run_id}` stops it", highlight=False, soft_wrap=True,
            )
            raise typer.Exit(128 + signum) from None
        err.print(f"{name}: cancelling run {run_id} …", highlight=False, soft_wrap=True)
        with interrupts_ignored():
            answer = cancel_quickly(client, run_id)
        counts = answer.get("sandbox_counts") or {}
        err.print(
            f"run {run_id}: cancel requested, status {answer['status']}"
            + (f" ({', '.join(f'{n} {k}' for k, n in sorted(counts.items()))})" if counts else ""),
            highlight=False,
            soft_wrap=True,
        )
        if as_json:
            print(json.dumps(answer, indent=2))
        raise typer.Exit(int(Exit.CANCELLED)) from None


def cancel_quickly(client: ApiClient, run_id: str) -> dict[str, Any]:
    """POST the cancel with a few tries only: the runner that sent the signal waits for no
    one (an unreachable controller raises Unreachable: exit 5, the run not cancelled)."""
    client.patience_s, client.attempts = None, CANCEL_ATTEMPTS
    answer: dict[str, Any] = client.post(f"/v1/runs/{run_id}/cancel")
    return answer


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
