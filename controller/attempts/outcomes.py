"""How an attempt and a run ended, from what the backend saw and why the controller
stopped it. Pure functions."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from controller.attempts.finisher import Outcome
from controller.backends.base import Observed
from controller.states import SandboxStatus, StopReason, run_outcome

__all__ = ["classify", "exit_outcome", "run_outcome"]


def exit_outcome(row: Any, seen: Observed) -> Outcome:
    """How an exited sandbox ended, with when the backend saw it end."""
    outcome = classify(row, seen)
    if seen.exited_at is not None:
        outcome = replace(outcome, exited_at=datetime.fromtimestamp(seen.exited_at, UTC))
    return outcome


def classify(row: Any, seen: Observed) -> Outcome:
    """How an exited sandbox ended, from the engine's state and why we stopped it."""
    if seen.oom_killed:
        return Outcome(
            SandboxStatus.OOM,
            seen.exit_code,
            f"killed: out of memory (limit {row.spec['resources'].get('memory')})",
        )
    if row.stop_reason == StopReason.TIMEOUT or seen.deadline_exceeded:
        return Outcome(
            SandboxStatus.TIMEOUT, seen.exit_code, f"timed out after {row.spec['timeout_s']} s"
        )
    if row.stop_reason == StopReason.CANCELLED:
        return Outcome(SandboxStatus.CANCELLED, seen.exit_code, "cancelled")
    if row.stop_reason == StopReason.BUDGET:
        return Outcome(SandboxStatus.CANCELLED, seen.exit_code, "stopped: run budget exceeded")
    if seen.exit_code == 0:
        return Outcome(SandboxStatus.SUCCEEDED, 0, None)
    if seen.reason:
        return Outcome(SandboxStatus.FAILED, seen.exit_code, seen.reason)
    error = row.error or f"exited with code {seen.exit_code}"
    return Outcome(SandboxStatus.FAILED, seen.exit_code, error, transient=bool(row.transient))
