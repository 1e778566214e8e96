"""Leadership: one reconciler acts, the others stand by, and a leader that cannot renew in
time stops acting before anyone may take its place (client-go's leader election).

The lease is a record with a holder and an epoch that grows by one at every change of
holder. A leader renews it every `retry` seconds; one that has not renewed for
`renew_deadline` seconds stops acting. A standby takes the lease over once the record
has not changed for `lease_duration` seconds of its own clock (so clocks of different
hosts never have to agree), or at once when its holder released it (a leader that shuts
down cleanly). `renew_deadline < lease_duration`: the old leader has stopped before the
new one starts. The fence (`controller.leader.fence`) covers what
timing cannot: a leader paused past its lease and then resumed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from controller import metrics
from controller.errors import SimpleError

logger = logging.getLogger(__name__)

Monotonic = Callable[[], float]


@dataclass(frozen=True)
class LeaseRecord:
    """What a lease says: who holds it, its epoch, and a mark that changes at each renewal."""

    holder: str
    epoch: int
    renewed: str


class LeaseStore(Protocol):
    """Where a lease lives. Every change is a compare-and-set."""

    def read(self) -> LeaseRecord | None: ...

    def acquire(self, holder: str, seen: LeaseRecord | None) -> LeaseRecord | None:
        """Take the lease if it still reads `seen` (None: create it); the new record, or
        None when someone else changed it first."""
        ...

    def renew(self, holder: str, epoch: int) -> bool:
        """Renew a lease held at `epoch`; False when it is no longer ours."""
        ...

    def release(self, holder: str, epoch: int) -> None:
        """Give the lease up (a leader shutting down): no holder, and a new epoch so that
        nothing of the old one passes the fence; a standby takes it at its next look."""
        ...


class Leadership:
    """Whether this process may act now. The base leads always (one process, SQLite)."""

    kind = "sole"

    def __init__(self, holder: str) -> None:
        self.holder = holder

    def leading(self) -> bool:
        return True

    @property
    def epoch(self) -> int | None:
        return None

    def step_down(self, reason: str) -> None:
        """Stop acting now (the fence refused a write)."""

    def start(self) -> None:
        metrics.LEADER.set(1)

    def stop(self) -> None:
        metrics.LEADER.set(0)

    def describe(self) -> dict[str, Any]:
        """Who leads, as far as this process knows: for /readyz and the dashboard."""
        return {"kind": self.kind, "holder": self.holder, "leading": self.leading(),
                "leader": self.holder, "epoch": self.epoch}


class SoleLeader(Leadership):
    """The embedded default: one process, the lease trivially held."""


def default_holder() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Elector(Leadership):
    """Contends for the lease in `store`; a background thread renews it or watches it."""

    kind = "lease"

    def __init__(
        self,
        store: LeaseStore,
        holder: str,
        lease_duration_s: float,
        renew_deadline_s: float,
        retry_s: float,
        on_change: Callable[[bool], None] | None = None,
        monotonic: Monotonic = time.monotonic,
    ) -> None:
        super().__init__(holder)
        self.store = store
        self.lease_duration_s, self.renew_deadline_s, self.retry_s = (
            lease_duration_s, renew_deadline_s, retry_s)
        self.on_change = on_change
        self.monotonic = monotonic
        self._epoch: int | None = None
        self._renewed = 0.0  # when the lease was last acquired or renewed (monotonic)
        self._seen: LeaseRecord | None = None
        self._seen_at: float | None = None  # when `_seen` was first read as it is
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def leading(self) -> bool:
        with self._lock:
            return self._epoch is not None and (
                self.monotonic() - self._renewed < self.renew_deadline_s)

    @property
    def epoch(self) -> int | None:
        with self._lock:
            return self._epoch

    def describe(self) -> dict[str, Any]:
        seen = self._seen
        leading = self.leading()
        return {"kind": self.kind, "holder": self.holder, "leading": leading,
                "leader": self.holder if leading else (seen.holder if seen else None),
                "epoch": self.epoch if leading else (seen.epoch if seen else None)}

    def start(self) -> None:
        metrics.LEADER.set(0)
        self._thread = threading.Thread(target=self._loop, name="elector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop contending; a leader releases the lease (its reconciler has stopped)."""
        self._stopping.set()
        if self._thread:
            self._thread.join(timeout=10)
        epoch = self.epoch
        self._set(None, "stopping")
        if epoch is not None:
            try:
                self.store.release(self.holder, epoch)
            except Exception as e:  # the lease then expires as if this process had died
                logger.warning("could not release the lease: %s: %s", type(e).__name__, e)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self.try_once()
            self._stopping.wait(self.retry_s)

    def try_once(self) -> None:
        """One renewal (leader) or one look at the lease (standby)."""
        try:
            if self.epoch is not None:
                self._renew()
            else:
                self._contend()
        except (SimpleError, OSError, RuntimeError) as e:
            logger.warning("lease %s: %s", "renewal" if self.epoch else "check", e)
        except Exception as e:  # a database error: the renew deadline decides
            logger.warning("lease %s failed: %s: %s", "renewal" if self.epoch else "check",
                           type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        if self.epoch is not None and self.monotonic() - self._renewed >= self.renew_deadline_s:
            self._set(None, f"not renewed within {self.renew_deadline_s:g} s")

    def _renew(self) -> None:
        epoch = self.epoch
        assert epoch is not None
        if self.store.renew(self.holder, epoch):
            with self._lock:
                self._renewed = self.monotonic()
        else:
            self._set(None, "the lease was taken over")

    def _contend(self) -> None:
        now = self.monotonic()
        record = self.store.read()
        if record != self._seen or self._seen_at is None:
            self._seen, self._seen_at = record, now
        if (record is not None and record.holder
                and now - (self._seen_at or now) < self.lease_duration_s):
            return  # held, and renewed within the lease as far as this clock can tell
        taken = self.store.acquire(self.holder, record)
        if taken is None:
            return
        self._seen, self._seen_at = taken, now
        with self._lock:
            self._renewed = now
        self._set(taken.epoch, f"took the lease from {record.holder if record else 'nobody'}")

    def step_down(self, reason: str) -> None:
        self._set(None, reason)

    def _set(self, epoch: int | None, why: str) -> None:
        with self._lock:
            before, self._epoch = self._epoch, epoch
        if before == epoch:
            return
        if epoch is not None:
            metrics.LEASE_TRANSITIONS.labels("acquired").inc()
            logger.info("leading now (lease epoch %d, holder %s): %s", epoch, self.holder, why)
        else:
            metrics.LEASE_TRANSITIONS.labels("lost").inc()
            logger.warning("stepped down (was epoch %s): %s", before, why)
        metrics.LEADER.set(int(epoch is not None))
        if self.on_change:
            self.on_change(epoch is not None)
