"""Group commit of sandbox events: one thread stores every batch queued meanwhile.

Under load, the `EventWriter` thread takes every batch queued while its previous
transaction ran, stores them all in one transaction (`ingest.write_group`), then
answers each request. When a group fails for a reason other than the database
being down, its requests are written one by one, so one bad batch fails alone.

The queue is bounded (in events): a batch that would overfill it is refused at once
with `BusyError` (429 and Retry-After), stored nowhere; the sender redelivers it.
A request is answered only after its transaction committed. Each controller has its
own writer; `close` (at the controller's) writes what is queued and ends the thread.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
from concurrent.futures import Future
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError

from controller import metrics
from controller.errors import BusyError
from controller.intake.event_batch import EventRequest
from controller.intake.ingest import fail_request, first_line, write_alone, write_group

logger = logging.getLogger(__name__)

MAX_GROUP_REQUESTS = 256
MAX_GROUP_EVENTS = 10_000
WRITER_LINGER_S = 1.0  # keep the connection this long after a group, for the next one
WRITER_IDLE_EXIT_S = 5.0  # end the thread after this long without work
CLOSE_WAIT_S = 30.0  # how long `close` waits for what is queued to be written


def _is_disconnect(e: SQLAlchemyError) -> bool:
    """The database is down or the connection broke: writing one by one cannot help."""
    return isinstance(e, OperationalError) or (
        isinstance(e, DBAPIError) and e.connection_invalidated
    )


Pending = tuple[EventRequest, "Future[dict[str, Any]]"]


class _Idle(enum.Enum):
    """What the writer thread does when nothing more is queued."""

    RELEASE = "let the kept connection go, and wait on"
    END = "end the thread"


class EventWriter:
    """Group commit: one thread stores every batch queued meanwhile in one transaction.

    `submit` returns a Future resolved after the commit (with the answer) or with the
    request's error. The thread starts on demand, keeps its connection while work
    keeps coming, and ends after a few idle seconds. (Two threads, each for half of the
    sandboxes, measured no faster.)
    """

    def __init__(
        self, engine: Engine, max_queued_events: int = 20_000, retry_after_s: int = 1
    ) -> None:
        self.engine = engine
        self.max_queued_events = max_queued_events
        self.retry_after_s = retry_after_s
        self._queue: queue.Queue[Pending | None] = queue.Queue()  # None: `close` asks
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._queued_events = 0  # in batches waiting in `_queue`
        self._close_asked = False  # the thread took `close`'s marker: end once idle

    @property
    def depth(self) -> int:
        """Batches waiting to be written."""
        return self._queue.qsize()

    def submit(self, request: EventRequest) -> Future[dict[str, Any]]:
        """Queue a batch; its future resolves after the commit. BusyError when full."""
        future: Future[dict[str, Any]] = Future()
        size = max(len(request.batch), 1)
        with self._lock:
            # An empty queue takes any batch, so one larger than the bound still gets in.
            if self._queued_events and self._queued_events + size > self.max_queued_events:
                raise BusyError(
                    f"the controller's event queue is full ({self._queued_events} events "
                    f"waiting, at most {self.max_queued_events}); nothing of this batch "
                    "was stored",
                    hint=f"send the same events again after {self.retry_after_s} s "
                    "(Retry-After)",
                    retry_after_s=self.retry_after_s,
                )
            self._queued_events += size
            self._queue.put((request, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="event-writer", daemon=True)
                self._thread.start()
        return future

    def close(self, timeout_s: float = CLOSE_WAIT_S) -> None:
        """Write what is queued, then end the thread now rather than after its idle wait
        (a later `submit` starts another)."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            self._queue.put(None)
        thread.join(timeout_s)

    def _run(self) -> None:
        conn: Connection | None = None  # kept while work keeps coming
        try:
            while True:
                held = conn is not None
                first = self._take(
                    WRITER_LINGER_S if held else WRITER_IDLE_EXIT_S, exit_when_idle=not held
                )
                if first is _Idle.END:
                    return
                if first is not _Idle.RELEASE:
                    conn = self._write(conn, self._fill([first]))
                elif conn is not None:
                    conn.close()
                    conn = None
        finally:
            if conn is not None:
                conn.close()

    def _take(self, timeout_s: float, exit_when_idle: bool) -> Pending | _Idle:
        """The next queued request, or what to do with none: with `exit_when_idle` (or
        once `close` asked) the thread ends, else it lets its connection go."""
        if self._close_asked:  # `close` is waiting: no idle wait
            timeout_s = 0.0
        while True:
            try:
                return self._taken(self._get(timeout_s))
            except queue.Empty:
                if not (exit_when_idle or self._close_asked):
                    return _Idle.RELEASE
            with self._lock:
                if self._queue.empty():
                    self._thread, self._close_asked = None, False
                    return _Idle.END
            timeout_s = 0.0  # queued meanwhile: take it at once

    def _get(self, timeout_s: float | None) -> Pending:
        """The next queued request, waiting up to `timeout_s` (None: not at all);
        queue.Empty when there is none, or when `close`'s marker came instead."""
        item = self._queue.get(block=timeout_s is not None, timeout=timeout_s)
        if item is None:
            self._close_asked = True
            raise queue.Empty
        return item

    def _taken(self, item: Pending) -> Pending:
        with self._lock:
            self._queued_events -= max(len(item[0].batch), 1)
        return item

    def _fill(self, group: list[Pending]) -> list[Pending]:
        """Add whatever else is queued, up to the group's limits."""
        events_in_group = sum(len(request.batch) for request, _ in group)
        while len(group) < MAX_GROUP_REQUESTS and events_in_group < MAX_GROUP_EVENTS:
            try:
                item = self._taken(self._get(None))
            except queue.Empty:
                break
            group.append(item)
            events_in_group += len(item[0].batch)
        return group

    def _write(self, conn: Connection | None, group: list[Pending]) -> Connection | None:
        """Write a group, answer its requests; the connection to keep for the next group."""
        requests = [request for request, _ in group]
        try:
            conn = self._write_or_isolate(conn, requests)
        except Exception as e:  # the thread must answer every request, whatever happened
            logger.exception("event writer failed")
            for _, future in group:
                future.set_exception(e)
            return None
        for request, future in group:
            if request.error is not None:
                future.set_exception(request.error)
            else:
                assert request.answer is not None
                metrics.EVENTS_INGESTED.inc(request.stored_count)
                future.set_result(request.answer)
        return conn

    def _write_or_isolate(
        self, conn: Connection | None, requests: list[EventRequest]
    ) -> Connection | None:
        """One transaction for the group; after a failure, one per request (unless the
        database is down, which fails them all at once)."""
        held = conn is not None
        try:
            conn = conn or self.engine.connect()
            with conn.begin():
                write_group(conn, requests)
            return conn
        except SQLAlchemyError as e:
            if conn is not None:  # whatever broke, the next group gets a fresh connection
                conn.invalidate()
                conn.close()
            if held and _is_disconnect(e):  # the kept connection went stale: once more
                return self._write_or_isolate(None, requests)
            if _is_disconnect(e) or len(requests) == 1:
                for request in requests:
                    fail_request(request, e)
            else:
                logger.warning(
                    "a group of %d event batches failed (%s); writing them one by one",
                    len(requests),
                    first_line(e),
                )
                for request in requests:
                    write_alone(self.engine, request)
            return None
