"""A sandbox's output under a budget: the head kept, the tail kept, the middle counted.

Standard library only, and importable as a plain file: the process backend's supervisor
(`process/supervisor.py`, run with `python -I -S`) loads it by path to write the
sandbox's output; the controller reads with it, and the container backends spool the
engine's log stream through it, so no reader ever holds more than one chunk.

On disk, in one directory:

- `output.log`: the first `budget // 2` bytes (the head);
- `output.tail.<offset>`: segments of `budget // 4` bytes each, named by the offset in
  the whole stream of their first byte. At most two are kept: a new one deletes the one
  before the last, so the tail holds between one and two segments' worth of the latest
  output, and the disk never holds more than the budget.

What lies between the head and the first segment kept was dropped; readers put one
marker line in its place (`marker`). Offsets are positions in the whole stream, as the
sandbox wrote it: a follower that asks from an offset inside the dropped middle gets the
marker, then the oldest byte still kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import BinaryIO

HEAD = "output.log"
TAIL_PREFIX = "output.tail."
CHUNK = 64 * 1024  # what one read returns at most
MIN_BUDGET = 4096
PIPE_BYTES = 1 << 20  # an output pipe's buffer (F_SETPIPE_SZ), and one read's size
F_SETPIPE_SZ = 1031  # <linux/fcntl.h>
READS_PER_TURN = 16  # reads of output between two looks at the child and its memory
DRAIN_S = 2.0  # after the exit: how long output still held by escaped processes is read


def marker(dropped: int) -> bytes:
    """The line that stands for the output dropped."""
    return f"\n[… {dropped} bytes dropped by SIMPLE's log budget …]\n".encode()


class BudgetWriter:
    """Writes a stream to `directory` under `budget` bytes on disk (see the module doc)."""

    def __init__(self, directory: str, budget: int) -> None:
        budget = max(int(budget), MIN_BUDGET)
        self.directory = directory
        self.head_limit = budget // 2
        self.segment = budget // 4
        self.written = 0  # bytes of the whole stream so far
        self._head = os.open(os.path.join(directory, HEAD), os.O_WRONLY | os.O_CREAT, 0o600)
        os.lseek(self._head, 0, os.SEEK_END)
        self.written = os.fstat(self._head).st_size  # a supervisor starts afresh; reuse is safe
        self._tail = -1
        self._tail_start = -1

    @property
    def dropped(self) -> int:
        """Bytes no longer kept: between the head and the first segment kept."""
        past_head = self.written - self.head_limit
        if past_head <= 0:
            return 0
        current = past_head // self.segment
        return max(current - 1, 0) * self.segment

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            if self.written < self.head_limit:
                fd, room = self._head, self.head_limit - self.written
            else:
                fd, room = self._segment_fd()
            n = os.write(fd, view[:room])
            self.written += n
            view = view[n:]

    def _segment_fd(self) -> tuple[int, int]:
        """The open segment and the room left in it; a full one gives way to the next."""
        past_head = self.written - self.head_limit
        start = self.head_limit + (past_head // self.segment) * self.segment
        if start != self._tail_start:
            if self._tail >= 0:
                os.close(self._tail)
            path = os.path.join(self.directory, f"{TAIL_PREFIX}{start}")
            self._tail = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            self._tail_start = start
            old = os.path.join(self.directory, f"{TAIL_PREFIX}{start - 2 * self.segment}")
            with contextlib.suppress(OSError):  # the segment before the last goes: two kept
                os.unlink(old)
        return self._tail, self.segment - (self.written - start)

    def close(self) -> None:
        for fd in (self._head, self._tail):
            if fd >= 0:
                os.close(fd)
        self._head = self._tail = -1


def output_pipe() -> tuple[int, int]:
    """The pipe the sandbox writes its output to: (read end, non-blocking; write end)."""
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(OSError):  # else the default 64 KiB: more turns, same bytes
        fcntl.fcntl(read_fd, F_SETPIPE_SZ, PIPE_BYTES)
    os.set_blocking(read_fd, False)
    return read_fd, write_fd


def pump(read_fd: int, log: BudgetWriter, turns: int = READS_PER_TURN) -> bool:
    """Copy what the pipe holds into the budgeted log; False once every writer is gone."""
    for _ in range(turns):
        try:
            data = os.read(read_fd, PIPE_BYTES)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        log.write(data)
    return True


def drain(read_fd: int, log: BudgetWriter) -> None:
    """After the exit: the rest of the output, until every writer is gone (or DRAIN_S, if a
    process that left the session still holds the pipe)."""
    deadline = time.monotonic() + DRAIN_S
    poller = select.poll()
    poller.register(read_fd, select.POLLIN)
    while time.monotonic() < deadline:
        poller.poll(max(deadline - time.monotonic(), 0) * 1000)
        if not pump(read_fd, log):
            return


def _parts(directory: str) -> list[tuple[int, str, int]]:
    """(stream offset, path, size) of the head and each segment kept, in order."""
    parts = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        if name == HEAD:
            start = 0
        elif name.startswith(TAIL_PREFIX) and name[len(TAIL_PREFIX):].isdigit():
            start = int(name[len(TAIL_PREFIX):])
        else:
            continue
        path = os.path.join(directory, name)
        try:
            parts.append((start, path, os.stat(path).st_size))
        except OSError:  # deleted meanwhile: it was dropped
            continue
    return sorted(parts)


def extent(directory: str) -> tuple[int, int]:
    """(bytes written so far, bytes dropped so far), as the files show them."""
    parts = _parts(directory)
    if not parts:
        return 0, 0
    head = parts[0][2] if parts[0][0] == 0 else 0
    dropped = parts[1][0] - head if len(parts) > 1 and parts[1][0] > head else 0
    return parts[-1][0] + parts[-1][2], dropped


def read_from(directory: str, offset: int, limit: int = CHUNK) -> tuple[bytes, int]:
    """Up to `limit` bytes of the stream from `offset` (plus a marker for what was dropped
    there), and the offset to read from next."""
    for start, path, size in _parts(directory):
        if offset >= start + size:
            continue
        prefix = b""
        if offset < start:  # in the dropped middle, or a segment deleted meanwhile
            prefix, offset = marker(start - offset), start
        try:
            with open(path, "rb") as handle:
                handle.seek(offset - start)
                data = handle.read(min(limit, start + size - offset))
        except OSError:  # dropped while we read: the next call starts past it
            continue
        return prefix + data, offset + len(data)
    return b"", offset


def open_kept(directory: str) -> tuple[Iterator[bytes], int]:
    """The output kept, in chunks of at most CHUNK bytes with the marker where it was cut,
    and the bytes dropped. Its files are opened now, so what is read is what was there at
    this call, whatever rotates or removes them meanwhile (a busy writer cannot prolong
    it, a clean-up cannot empty it)."""
    opened: list[tuple[int, BinaryIO, int]] = []
    for start, path, _ in _parts(directory):
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed by the generator
        except OSError:  # rotated away meanwhile: dropped
            continue
        opened.append((start, handle, os.fstat(handle.fileno()).st_size))
    head = opened[0][2] if opened and opened[0][0] == 0 else 0
    dropped = opened[1][0] - head if len(opened) > 1 and opened[1][0] > head else 0
    return _read_opened(opened), dropped


def _read_opened(opened: list[tuple[int, BinaryIO, int]]) -> Iterator[bytes]:
    try:
        end = 0
        for start, handle, size in opened:
            if start > end:
                yield marker(start - end)
            left = size
            while left > 0:
                data = handle.read(min(CHUNK, left))
                if not data:
                    break
                left -= len(data)
                yield data
            end = start + size
    finally:
        for _, handle, _ in opened:
            handle.close()


def chunks(directory: str) -> Iterator[bytes]:
    """The output kept, in chunks (see `open_kept`)."""
    return open_kept(directory)[0]


def read_all(directory: str) -> bytes:
    """The output kept, in one piece: at most the budget and one marker line."""
    return b"".join(chunks(directory))


def spool(stream: Iterable[bytes], budget: int) -> tuple[Iterator[bytes], int]:
    """Write `stream` (an engine's log stream) under `budget` to a temporary directory, a
    chunk at a time: the output kept, in chunks, and the bytes dropped. The directory is
    removed at once; the files stay readable through their open handles."""
    directory = tempfile.mkdtemp(prefix="simple-logs-")
    try:
        writer = BudgetWriter(directory, budget)
        try:
            for data in stream:
                writer.write(data)
        finally:
            writer.close()
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    try:
        return open_kept(directory)  # its files open: the directory can go at once
    finally:
        shutil.rmtree(directory, ignore_errors=True)
