"""The overload case's senders: one per running sandbox, each appending events at a set
rate and delivering them with the sandbox runtime's own outbox and sender
(`sandbox_image.outbox`, Retry-After honoured) under that sandbox's token.

Sixteen full runtimes cannot append 500 events/s each on a two-core machine (each step
is a simulation step and a transaction), so the sandboxes only wait, and the load comes
from here: the same delivery code, the same tokens and URLs, at the promised rate.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sandbox_image.contract import EventType, SandboxEnv
from sandbox_image.outbox import EventSender, Outbox
from sandbox_image.retry import Deadline
from sandbox_image.snapshot import SnapshotStore

# What the sandboxes run: wait for SIGUSR1 (sent once every sender has delivered), exit 0.
WAIT_FOR_USR1 = [
    "python", "-c",
    "import signal, sys\n"
    "signal.signal(signal.SIGUSR1, lambda *_: sys.exit(0))\n"
    "while True:\n    signal.pause()\n",
]


@dataclass
class Sender:
    """One sandbox's sender: its outbox in a local file, delivering in the background."""

    env: SandboxEnv
    path: Path
    events: int
    rate: float
    appended_s: float = 0.0
    error: BaseException | None = None
    _thread: threading.Thread | None = field(default=None, repr=False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"send-{self.env.sandbox_id}")
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        assert self._thread is not None
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"sender of {self.env.sandbox_id} still delivering")
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            self._send()
        except BaseException as e:  # reported by join
            self.error = e

    def _send(self) -> None:
        store = SnapshotStore.create(self.path)
        store.use_fast_commits()  # the file is the evidence, not a machine-crash survivor
        outbox = Outbox(store)
        auth = {"Authorization": f"Bearer {self.env.sandbox_token}"}
        with httpx.Client(headers=auth) as client:
            sender = EventSender(outbox, client, self.env.events_url)
            sender.start()
            outbox.append(EventType.STARTED, {"attempt": self.env.attempt,
                                              "steps_total": self.events, "agents": 1})
            began = time.monotonic()
            for step in range(1, self.events + 1):
                delay = began + step / self.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                outbox.append(EventType.PROGRESS, {"step": step, "steps_total": self.events})
            self.appended_s = time.monotonic() - began
            outbox.append(EventType.COMPLETED, {"steps_completed": self.events})
            left = sender.flush(Deadline(300))
        if left:
            raise AssertionError(f"{self.env.sandbox_id}: {left} events undelivered")


def senders_for(containers: list[Any], directory: Path, events: int, rate: float
                ) -> list[Sender]:
    """A sender per container, from the credentials the controller gave that container."""
    made = []
    for container in containers:
        environ = dict(item.split("=", 1) for item in container.attrs["Config"]["Env"])
        env = SandboxEnv.from_environ(environ)
        made.append(Sender(env, directory / f"{env.sandbox_id}.sqlite", events, rate))
    return made


def outbox_of(sender: Sender) -> dict[str, bool]:
    """{event id: acknowledged} from a sender's outbox file."""
    conn = sqlite3.connect(sender.path)
    try:
        rows = conn.execute("SELECT id, delivered FROM outbox").fetchall()
    finally:
        conn.close()
    return {str(event_id): int(delivered) == 1 for event_id, delivered in rows}
