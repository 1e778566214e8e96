"""A backend that starts nothing and sees nothing, for tests whose subject is the
reconciler's own pass: it records what it was asked to launch and to stop."""

from __future__ import annotations

import threading
from typing import Any

from controller.backends.base import Backend, Observed, SandboxSpec


class QuietBackend(Backend):
    name = "process"

    def __init__(self) -> None:
        self.launched: list[str] = []
        self.stopped: list[str] = []
        self.lock = threading.Lock()

    def launch(self, spec: SandboxSpec) -> None:
        with self.lock:
            self.launched.append(spec.env.sandbox_id)

    def observe(self) -> list[Observed]:
        return []

    def stop(self, sandbox_id: str) -> None:
        with self.lock:
            self.stopped.append(sandbox_id)

    def read_logs(self, sandbox_id: str) -> bytes:
        return b""

    def remove(self, sandbox_id: str) -> None:
        return None

    def render(self, spec: SandboxSpec) -> dict[str, Any]:
        return {}
