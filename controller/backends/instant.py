"""The `instant` backend, for benches and tests of the controller itself: every sandbox
"runs" no command and exits 0 the moment it is launched, so what is measured is the
controller alone (claims, exits recorded, runs driven), never a process or container.

Not offered by `SIMPLE_BACKEND`; pass it to `Controller(settings, backend=...)`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from controller.backends.base import Backend, Notify, Observed, ObservedState, SandboxSpec
from controller.errors import NotFoundError


class InstantBackend(Backend):
    name = "instant"

    def __init__(self, notify: Notify | None = None) -> None:
        super().__init__(notify)
        self._lock = threading.Lock()
        self._exited: dict[str, Observed] = {}
        self.launched = 0

    def render(self, spec: SandboxSpec) -> dict[str, Any]:
        return {"kind": "instant", "sandbox_id": spec.sandbox_id, "labels": spec.labels}

    def launch(self, spec: SandboxSpec) -> None:
        observed = Observed(
            spec.sandbox_id,
            spec.env.run_id,
            spec.env.attempt,
            ObservedState.EXITED,
            exit_code=0,
            exited_at=time.time(),
            controller_id=spec.controller_id or None,
        )
        with self._lock:
            self._exited[spec.sandbox_id] = observed
            self.launched += 1
        self._exit_seen(observed)

    def observe(self) -> list[Observed]:
        with self._lock:
            return list(self._exited.values())

    def stop(self, sandbox_id: str) -> None:
        return None

    def read_logs(self, sandbox_id: str) -> bytes:
        with self._lock:
            if sandbox_id not in self._exited:
                raise NotFoundError(f"no sandbox {sandbox_id}")
        return b""

    def remove(self, sandbox_id: str) -> None:
        with self._lock:
            self._exited.pop(sandbox_id, None)
