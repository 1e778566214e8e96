"""Transfers through the controller (the local store has no presigned URLs): bounded.

An upload is spooled to a temporary file in the store's staging directory a chunk at a
time, each write in a worker thread (the event loop never waits on the disk), and moved
into place once whole; a download is streamed from the store in chunks. Neither ever
holds a whole object in memory. One sandbox attempt has at most one upload and one
download under way: one more gets 429 naming the transfer under way.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from anyio import to_thread
from starlette.requests import Request

from controller.api.held import Held
from controller.errors import BusyError, PayloadTooLargeError
from controller.store.base import ObjectStore

WRITE_BYTES = 1024 * 1024  # what an upload gathers in memory before a write to disk

Key = tuple[str, int, str]  # sandbox id, attempt, "upload" | "download"


class TransferSlots:
    """The transfers under way, at most one per sandbox attempt and direction."""

    def __init__(self) -> None:
        self._busy: set[Key] = set()
        self._lock = threading.Lock()

    def take(self, sandbox_id: str, attempt: int, direction: str) -> Transfer:
        """The attempt's one slot for `direction`, or BusyError (429, Retry-After)."""
        key = (sandbox_id, attempt, direction)
        with self._lock:
            if key in self._busy:
                article = "an" if direction[0] in "aeiou" else "a"
                raise BusyError(
                    f"sandbox {sandbox_id} attempt {attempt} already has {article} {direction} "
                    f"under way; one {direction} at a time per sandbox attempt",
                    hint=f"wait for the {direction} under way to end, then try again",
                )
            self._busy.add(key)
        return Transfer(self, key)

    def busy(self) -> int:
        with self._lock:
            return len(self._busy)

    def _give_back(self, key: Key) -> None:
        with self._lock:
            self._busy.discard(key)


class Transfer(Held):
    """One transfer's slot; released once, however the transfer ends."""

    def __init__(self, slots: TransferSlots, key: Key) -> None:
        super().__init__(lambda: slots._give_back(key))


async def receive(
    request: Request, store: ObjectStore, key: str, limit: int, what: str, hint: str
) -> int:
    """Spool the request's body to a temporary file and store it under `key`; its size.
    413 (PayloadTooLargeError) past `limit`, the file removed."""
    fd, path = await to_thread.run_sync(store.spool)
    handle = os.fdopen(fd, "wb")
    size = 0
    pending = bytearray()
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLargeError(f"{what} is over the {limit}-byte limit", hint=hint)
            pending += chunk
            if len(pending) >= WRITE_BYTES:
                await to_thread.run_sync(handle.write, bytes(pending))
                pending.clear()
        await to_thread.run_sync(handle.write, bytes(pending))
        await to_thread.run_sync(handle.close)
        await to_thread.run_sync(store.put_file, key, path)
    finally:
        pending.clear()
        await to_thread.run_sync(_discard, handle, path)
    return size


def _discard(handle: Any, path: Path) -> None:
    """Close the spool and remove it, if `put_file` did not move it away."""
    handle.close()
    path.unlink(missing_ok=True)


def send(chunks: Iterator[bytes], transfer: Transfer) -> Iterator[bytes]:
    """`chunks` as a response body (Starlette iterates it in worker threads); the slot is
    given back when it ends, is closed, or is dropped before its first chunk."""
    stream = _send(chunks, transfer)
    weakref.finalize(stream, transfer.release)
    return stream


def _send(chunks: Iterator[bytes], transfer: Transfer) -> Iterator[bytes]:
    try:
        yield from chunks
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
        transfer.release()
