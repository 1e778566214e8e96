"""Sandbox and run states, and which of them are final."""

from __future__ import annotations

from enum import StrEnum


class SandboxStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    OOM = "oom"
    CANCELLED = "cancelled"
    LOST = "lost"
    SKIPPED = "skipped"


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    BUDGET_EXCEEDED = "budget_exceeded"


ACTIVE_SANDBOX = frozenset({SandboxStatus.PENDING, SandboxStatus.RUNNING})
ACTIVE_RUN = frozenset({RunStatus.PENDING, RunStatus.RUNNING})
FAILED_SANDBOX = frozenset(
    {SandboxStatus.FAILED, SandboxStatus.TIMEOUT, SandboxStatus.OOM, SandboxStatus.LOST}
)


class StopReason(StrEnum):
    """Why the controller stopped a running sandbox; decides how its exit is classified."""

    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    BUDGET = "budget"


def run_outcome(
    cancelled: bool, error: str | None, statuses: list[str], staged_ok: bool | None = None
) -> RunStatus:
    """A finished run's status from its sandboxes' (a staged run's: from its policies).
    Pure: the run driver sets it, `simplectl verify` checks it."""
    if cancelled:
        return RunStatus.CANCELLED
    if error and error.startswith("budget"):
        return RunStatus.BUDGET_EXCEEDED
    if staged_ok is not None:
        return RunStatus.SUCCEEDED if staged_ok else RunStatus.FAILED
    if statuses and all(s == SandboxStatus.SUCCEEDED for s in statuses):
        return RunStatus.SUCCEEDED
    return RunStatus.FAILED
