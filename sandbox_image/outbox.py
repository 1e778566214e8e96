"""The event outbox and its delivery to the controller.

Every event is first committed to the `outbox` table of the sandbox's SQLite
file (often in the same transaction as the step it reports), then a background
`EventSender` POSTs undelivered events in `seq` order, up to 100 per request,
and marks them delivered. Delivery is at-least-once: the controller stores each
event id once and answers a replay with the same result.

Responses: any 2xx delivers the batch. Connection errors, timeouts, 429 and 5xx
are retried with capped exponential backoff and full jitter (honouring
Retry-After), forever until the flush deadline. 401/403 stop delivery: the
token is no longer valid. Other 4xx (409 conflict, 422 invalid, ...) cannot be
cured by retrying: a batch that gets one is re-sent one event at a time, so only
the refused events are dropped, each with a warning naming it.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

import httpx

from sandbox_image.contract import EventType
from sandbox_image.retry import Backoff, Deadline, retry_after_s

if TYPE_CHECKING:
    from sandbox_image.snapshot import SnapshotStore

logger = logging.getLogger(__name__)

OUTBOX_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE,
  body TEXT NOT NULL, delivered INTEGER NOT NULL DEFAULT 0);  -- 0 no, 1 yes, 2 refused
"""
MAX_BATCH = 100
REQUEST_TIMEOUT_S = 10.0
IDLE_POLL_S = 1.0


def utc_now_iso() -> str:
    """The current UTC time as ISO-8601 with a `Z`, e.g. 2026-11-21T12:40:00.123Z."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class PendingEvent:
    """One undelivered event as stored: its seq, id and exact JSON body."""

    seq: int
    event_id: str
    body: str


class Outbox:
    """The `outbox` table: append events, read the undelivered, mark them delivered."""

    def __init__(self, store: SnapshotStore) -> None:
        self.store = store
        self.appended = threading.Event()  # wakes the sender
        store.ensure_schema(OUTBOX_SCHEMA_SQL)

    def append(self, event_type: EventType, data: dict[str, Any],
               conn: sqlite3.Connection | None = None) -> int:
        """Store one event (inside `conn`'s open transaction if given); returns its seq."""
        if conn is None:
            with self.store.transaction() as own:
                return self.append(event_type, data, own)
        (seq,) = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM outbox").fetchone()
        event_id = uuid.uuid4().hex
        body = json.dumps({"id": event_id, "seq": seq, "type": str(event_type),
                           "time": utc_now_iso(), "data": data}, separators=(",", ":"))
        conn.execute("INSERT INTO outbox (seq, id, body, delivered) VALUES (?, ?, ?, 0)",
                     (seq, event_id, body))
        self.appended.set()
        return int(seq)

    def pending(self, limit: int = MAX_BATCH) -> list[PendingEvent]:
        """The oldest undelivered events, in seq order."""
        rows = self.store.read(
            "SELECT seq, id, body FROM outbox WHERE delivered = 0 ORDER BY seq LIMIT ?", (limit,))
        return [PendingEvent(int(s), str(i), str(b)) for s, i, b in rows]

    def count_pending(self) -> int:
        """How many events are not delivered yet."""
        rows = self.store.read("SELECT COUNT(*) FROM outbox WHERE delivered = 0", ())
        return int(rows[0][0])

    def mark_delivered(self, events: list[PendingEvent], refused: bool = False) -> None:
        """Mark `events` done: delivered = 1, or 2 when the controller refused them."""
        with self.store.transaction() as conn:
            conn.executemany("UPDATE outbox SET delivered = ? WHERE seq = ?",
                             [(2 if refused else 1, e.seq) for e in events])


class Outcome(Enum):
    """What one POST of a batch came to."""

    DELIVERED = "delivered"
    REJECTED = "rejected"  # a 4xx that retrying cannot cure
    RETRY = "retry"  # connection error, timeout, 429, 5xx
    STOP = "stop"  # 401/403: the token is no longer valid


class EventSender:
    """Background thread that delivers the outbox to the controller, in order."""

    def __init__(self, outbox: Outbox, client: httpx.Client, url: str, *,
                 backoff: Backoff | None = None, batch_size: int = MAX_BATCH) -> None:
        self.outbox = outbox
        self.client = client
        self.url = url
        self.backoff = backoff or Backoff()
        self.batch_size = batch_size
        self.delivered = 0
        self.rejected = 0
        self.auth_failed = False
        self._failures = 0  # consecutive failed POSTs
        self._isolate_through = 0  # events up to this seq are sent one at a time
        self._deadline: Deadline | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="event-sender", daemon=True)

    def start(self) -> None:
        """Start delivering in the background."""
        self._thread.start()

    def flush(self, deadline: Deadline) -> int:
        """Wait until every event is delivered or the deadline passes, then stop;
        returns how many events are left undelivered."""
        self._deadline = deadline
        self.outbox.appended.set()  # and the sender's next wait is capped by the deadline
        while True:
            left = self.outbox.count_pending()
            if (left == 0 or self.auth_failed or not self._thread.is_alive()
                    or deadline.remaining() <= 0):
                break
            time.sleep(0.02)
        self.stop()
        return left

    def stop(self) -> None:
        """Stop the thread (it may be in a POST; it is a daemon, so exit never waits long)."""
        self._stop.set()
        self.outbox.appended.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._deliver_once()
        except Exception:
            logger.exception("event sender stopped by an unexpected error")

    def _deliver_once(self) -> None:
        self.outbox.appended.clear()
        batch = self.outbox.pending(self.batch_size)
        if batch and batch[0].seq <= self._isolate_through:
            batch = batch[:1]
        if not batch:
            self.outbox.appended.wait(IDLE_POLL_S)
            return
        outcome, detail, retry_after = self._post(batch)
        if outcome is Outcome.DELIVERED:
            self.outbox.mark_delivered(batch)
            self.delivered += len(batch)
            self._failures = 0
        elif outcome is Outcome.REJECTED:
            self._reject(batch, detail)
        elif outcome is Outcome.STOP:
            logger.error("controller refused this sandbox's token (%s); stopping event "
                         "delivery, %d events undelivered", detail, self.outbox.count_pending())
            self.auth_failed = True
            self._stop.set()
        else:
            self._failures += 1
            delay = self._cap(retry_after or self.backoff.delay(self._failures))
            logger.warning("event delivery failed (%s), attempt %d; retrying in %.2f s",
                           detail, self._failures, delay)
            self._stop.wait(delay)

    def _reject(self, batch: list[PendingEvent], detail: str) -> None:
        self._failures = 0
        if len(batch) > 1:
            logger.warning("controller refused a batch of %d events (%s); re-sending them one "
                           "at a time to find the bad ones", len(batch), detail)
            self._isolate_through = batch[-1].seq
            return
        logger.warning("controller refused event seq=%d id=%s (%s); dropping it, retrying "
                       "cannot help", batch[0].seq, batch[0].event_id, detail)
        self.outbox.mark_delivered(batch, refused=True)
        self.rejected += 1

    def _post(self, batch: list[PendingEvent]) -> tuple[Outcome, str, float | None]:
        body = '{"events":[' + ",".join(e.body for e in batch) + "]}"
        try:
            response = self.client.post(
                self.url, content=body.encode(), timeout=self._request_timeout(),
                headers={"Content-Type": "application/json"},
            )
        except httpx.TransportError as e:
            return Outcome.RETRY, f"{type(e).__name__}: {e}", None
        code = response.status_code
        detail = f"HTTP {code}: {response.text[:500]}"
        if response.is_success:
            return Outcome.DELIVERED, detail, None
        if code in (401, 403):
            return Outcome.STOP, detail, None
        if code == 429 or code >= 500:
            return Outcome.RETRY, detail, retry_after_s(response)
        return Outcome.REJECTED, detail, None

    def _request_timeout(self) -> float:
        if self._deadline is None:
            return REQUEST_TIMEOUT_S
        return max(0.5, min(REQUEST_TIMEOUT_S, self._deadline.remaining()))

    def _cap(self, delay: float) -> float:
        if self._deadline is None:
            return delay
        return max(0.0, min(delay, self._deadline.remaining()))
