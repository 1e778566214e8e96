"""Informers: a local cache of one kind of Kubernetes object (Jobs, Pods), kept current
by one LIST at start and a WATCH from then on, so reading what runs costs the API server
nothing per reconcile pass.

Bookkeeping follows the API's watch contract: the cache remembers the resourceVersion
of the last event (or BOOKMARK, which the informer asks for) and re-watches from it
when a watch ends (the server closes them after `timeoutSeconds`); a `410 Gone`
(the version is too old) relists; any other failure waits with capped exponential
backoff and jitter, then re-watches. The client side filters by label too, so a
server that ignores the selector on watches cannot leak other objects in.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 240  # the server ends each watch after this; we re-watch from the version
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0

ListFn = Callable[[], tuple[list[Mapping[str, Any]], str | None]]
"""One full (paged) LIST: the items and the list's resourceVersion."""
WatchFn = Callable[[str | None], Any]
"""Open a watch from a resourceVersion: a streaming HTTP response (lines of JSON)."""


class Gone(Exception):
    """The watch's resourceVersion is too old (410): only a relist helps."""


class Informer:
    """The cache of one resource; `items()` reads it, `on_change` hears every change."""

    def __init__(
        self,
        kind: str,
        list_fn: ListFn,
        watch_fn: WatchFn,
        labels: Mapping[str, str],
        on_change: Callable[[], None],
        *,
        sleeper: Callable[[float], bool] | None = None,
        jitter: Callable[[], float] | None = None,
    ) -> None:
        import random

        self.kind = kind
        self._list_fn, self._watch_fn = list_fn, watch_fn
        self._labels = dict(labels)
        self._on_change = on_change
        self._closed = threading.Event()
        self._sleep = sleeper or self._closed.wait
        self._jitter = jitter or random.random
        self._lock = threading.Lock()
        self._cache: dict[str, Mapping[str, Any]] = {}
        self._response: Any = None
        self._thread: threading.Thread | None = None
        self.resource_version: str | None = None
        self.lists = 0  # how many LISTs this informer made (start-up, then only after a 410)
        self.watches = 0

    def start(self) -> None:
        """List once (so the cache is whole before the first read), then watch in a thread."""
        self.relist()
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.kind}", daemon=True)
        self._thread.start()

    def items(self) -> list[Mapping[str, Any]]:
        with self._lock:
            return list(self._cache.values())

    def find(self, predicate: Callable[[Mapping[str, Any]], bool]) -> list[Mapping[str, Any]]:
        with self._lock:
            return [o for o in self._cache.values() if predicate(o)]

    def close(self) -> None:
        self._closed.set()
        response = self._response
        if response is not None:  # shutting the socket down unblocks the watch thread's read
            with contextlib.suppress(Exception):
                response.shutdown()  # urllib3 >= 2.3; close() would wait for the reader
        if self._thread is not None:
            self._thread.join(timeout=5)

    def relist(self) -> None:
        items, version = self._list_fn()
        self.lists += 1
        with self._lock:
            self._cache = {_name(o): o for o in items if self._ours(o)}
            self.resource_version = version
        self._on_change()

    # -- the watch loop -------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        while not self._closed.is_set():
            try:
                self._watch_once()
                failures = 0  # the server ended the watch: re-watch from where we are
            except Gone:
                log.info("%s watch: resourceVersion too old (410); relisting", self.kind)
                failures = self._relist_or_count(failures)
            except Exception as e:  # any failure: back off, then watch again
                if self._closed.is_set():
                    return
                failures += 1
                delay = self._backoff(failures)
                log.warning("%s watch failed (%s); again in %.1f s", self.kind, e, delay)
                if self._sleep(delay):
                    return

    def _relist_or_count(self, failures: int) -> int:
        try:
            self.relist()
            return 0
        except Exception as e:  # the API is away: back off like any failure
            failures += 1
            delay = self._backoff(failures)
            log.warning("%s relist failed (%s); again in %.1f s", self.kind, e, delay)
            self._sleep(delay)
            self.resource_version = None  # relist again next time round
            return failures

    def _watch_once(self) -> None:
        if self.resource_version is None:
            raise Gone()
        response = self._watch_fn(self.resource_version)
        self.watches += 1
        self._response = response
        try:
            for line in _lines(response):
                if self._closed.is_set():
                    return
                self._apply(json.loads(line))
        finally:
            self._response = None
            _release(response)

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            self.resource_version = version or self.resource_version
            return
        if not self._ours(obj):
            return
        with self._lock:
            if kind == "DELETED":
                self._cache.pop(_name(obj), None)
            else:  # ADDED, MODIFIED
                self._cache[_name(obj)] = obj
            self.resource_version = version or self.resource_version
        self._on_change()

    def _ours(self, obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in self._labels.items())

    def _backoff(self, failures: int) -> float:
        ceiling = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** min(failures - 1, 10))
        return ceiling / 2 + self._jitter() * ceiling / 2


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-separated JSON events of a streaming answer, as they arrive."""
    buffer = b""
    for chunk in response.stream(4096, decode_content=True):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _release(response: Any) -> None:
    for method in ("close", "release_conn"):  # best effort on a stream that is done
        with contextlib.suppress(Exception):
            getattr(response, method)()
