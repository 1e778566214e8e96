"""The one interface every backend implements (process, docker, kubernetes).

A backend starts sandboxes from a `SandboxSpec`, reports what it sees (found by
label, never from memory), stops, serves logs, and removes what it created.
It knows nothing of the database, the reconciler or the other backends.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from sandbox_image.contract import (
    LABEL_ATTEMPT,
    LABEL_CONTROLLER,
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_RUN_ID,
    LABEL_SANDBOX_ID,
    LABEL_TEMPLATE_ID,
    SandboxEnv,
)

LOG_CHUNK = 64 * 1024  # what one read of a sandbox's output returns at most

Notify = Callable[[], None]
"""Called by a backend when something changed (a sandbox exited) to wake the reconciler."""

ExitListener = Callable[["Observed"], None]
"""Called by a backend with each exit as soon as it learns of it (pushed, not polled)."""


@dataclass(frozen=True)
class Resources:
    """Limits in Kubernetes quantity notation: cpu "500m" or "1", memory "512Mi"."""

    cpu: str | None = None
    memory: str | None = None
    pids: int = 256


@dataclass(frozen=True)
class SandboxSpec:
    """Everything needed to start one attempt of one sandbox."""

    env: SandboxEnv
    image: str
    command: tuple[str, ...]
    timeout_s: int
    resources: Resources = field(default_factory=Resources)
    controller_id: str = ""  # stamped as a label when set
    # the template's secrets by reference, (name, key, as): each backend hands the value
    # over as `as` (controller/backends/template_secrets.py); never the values here
    secrets: tuple[tuple[str, str, str], ...] = ()
    log_stop: bool = False  # stop it once its output passes the log budget (else keep it)

    @property
    def sandbox_id(self) -> str:
        return self.env.sandbox_id

    @property
    def labels(self) -> dict[str, str]:
        labels = sandbox_labels(
            self.env.run_id, self.env.sandbox_id, self.env.template_id, self.env.attempt
        )
        if self.controller_id:
            labels[LABEL_CONTROLLER] = self.controller_id
        return labels


def sandbox_labels(run_id: str, sandbox_id: str, template_id: str, attempt: int) -> dict[str, str]:
    """the labels of docs/architecture.md, stamped on everything a backend creates."""
    return {
        LABEL_MANAGED_BY: LABEL_MANAGED_BY_VALUE,
        LABEL_RUN_ID: run_id,
        LABEL_SANDBOX_ID: sandbox_id,
        LABEL_TEMPLATE_ID: template_id,
        LABEL_ATTEMPT: str(attempt),
    }


class ObservedState(StrEnum):
    PENDING = "pending"  # created, not yet running (pulling, scheduling)
    RUNNING = "running"
    EXITED = "exited"


@dataclass(frozen=True)
class Observed:
    """What a backend sees of one sandbox attempt right now."""

    sandbox_id: str
    run_id: str
    attempt: int
    state: ObservedState
    exit_code: int | None = None
    oom_killed: bool = False
    deadline_exceeded: bool = False
    reason: str | None = None  # e.g. "ImagePullBackOff: ... (hint: ...)" for a failed start
    exited_at: float | None = None  # epoch seconds, when the backend knows it
    controller_id: str | None = None  # the simple.dev/controller label, if any


@dataclass
class LogView:
    """A sandbox's output as kept under its log budget, read in chunks of at most
    LOG_CHUNK bytes (never all at once), and how many bytes the budget dropped."""

    chunks: Iterator[bytes]
    dropped: int = 0


class Backend(ABC):
    """Starts and follows sandboxes. Every method is synchronous and has a timeout."""

    name: ClassVar[str]
    supports_adoption: ClassVar[bool] = True
    supports_oom_detection: ClassVar[bool] = False
    # Whether `stop` deletes the sandbox and its output with it (so the controller archives
    # the output before stopping); otherwise the output is archived once, after the exit.
    stop_removes_output: ClassVar[bool] = False

    def __init__(self, notify: Notify | None = None) -> None:
        self._notify: Notify = notify or (lambda: None)
        self._on_exit: ExitListener | None = None

    def listen_for_exits(self, listener: ExitListener) -> None:
        """Hand every exit the backend sees as it happens to `listener` (the reconciler's
        exit path), instead of only waking the next pass."""
        self._on_exit = listener

    def _exit_seen(self, observed: Observed) -> None:
        """Report one exit: to the listener when there is one, else wake the reconciler."""
        listener = self._on_exit
        if listener is not None:
            listener(observed)
        else:
            self._notify()

    @abstractmethod
    def launch(self, spec: SandboxSpec) -> None:
        """Start one attempt. Raises BackendError (transient or not) when it cannot."""

    @abstractmethod
    def observe(self) -> list[Observed]:
        """Every sandbox this backend manages, found by label."""

    @abstractmethod
    def stop(self, sandbox_id: str) -> None:
        """Kill the sandbox now. Idempotent: stopping a gone sandbox is no error."""

    @abstractmethod
    def read_logs(self, sandbox_id: str) -> bytes:
        """The sandbox's output so far, as kept under the log budget (so at most the
        budget and a marker line). Raises NotFoundError when it is gone."""

    def open_logs(self, sandbox_id: str) -> LogView:
        """The output kept, in chunks (what archiving and serving read); backends that
        can read in pieces do so. Raises NotFoundError when it is gone."""
        data = self.read_logs(sandbox_id)
        return LogView(iter([data[i : i + LOG_CHUNK] for i in range(0, len(data), LOG_CHUNK)]))

    def read_logs_from(
        self, sandbox_id: str, offset: int, limit: int = LOG_CHUNK
    ) -> tuple[bytes, int]:
        """Up to `limit` bytes of output from `offset` (a position in what the sandbox
        wrote), and the offset to read from next: what a follower polls. Backends that
        keep their output in files read only those bytes."""
        data = self.read_logs(sandbox_id)
        piece = data[offset : offset + limit]
        return piece, offset + len(piece)

    @abstractmethod
    def remove(self, sandbox_id: str) -> None:
        """Delete what was created for the sandbox (after its logs are archived)."""

    @abstractmethod
    def render(self, spec: SandboxSpec) -> dict[str, Any]:
        """What `launch` would create, as data (for `--dry-run`). Pure: no I/O."""

    def check(self) -> None:
        """Raise UnavailableError naming the reason when the backend cannot be used."""

    def start(self) -> None:
        """Prepare what launches need, once, as the controller starts (off any launch)."""

    def follow_logs(
        self, sandbox_id: str, is_running: Callable[[], bool], poll_s: float = 0.5
    ) -> Iterator[bytes]:
        """Yield output as it grows until the sandbox stops, from an offset, in bounded
        chunks; backends may do better."""
        sent = 0
        while True:
            running = is_running()
            while True:
                data, sent = self.read_logs_from(sandbox_id, sent)
                if data:
                    yield data
                if len(data) < LOG_CHUNK:  # caught up
                    break
            if not running:
                return
            time.sleep(poll_s)

    def close(self) -> None:
        """Release clients and threads."""
