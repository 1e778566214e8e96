"""The log budget's files: head and tail kept, the middle counted, offsets from the stream."""

from __future__ import annotations

import os
from pathlib import Path

from controller.backends import logbudget


def write(directory: Path, budget: int, data: bytes, piece: int = 1000) -> logbudget.BudgetWriter:
    writer = logbudget.BudgetWriter(str(directory), budget)
    for i in range(0, len(data), piece):
        writer.write(data[i : i + piece])
    writer.close()
    return writer


def stream(n: int) -> bytes:
    return bytes(i % 251 for i in range(n))


def test_under_the_budget_everything_is_kept(tmp_path: Path) -> None:
    data = stream(7000)
    write(tmp_path, 8192, data)
    assert logbudget.read_all(str(tmp_path)) == data
    assert logbudget.extent(str(tmp_path)) == (7000, 0)


def test_past_the_budget_head_and_tail_are_kept_and_the_middle_counted(tmp_path: Path) -> None:
    budget, size = 8192, 100_000
    data = stream(size)
    writer = write(tmp_path, budget, data, piece=777)
    on_disk = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert on_disk <= budget
    written, dropped = logbudget.extent(str(tmp_path))
    assert written == size and dropped == writer.dropped > 0
    kept = logbudget.read_all(str(tmp_path))
    mark = logbudget.marker(dropped)
    head, _, tail = kept.partition(mark)
    assert head == data[: budget // 2]
    assert tail == data[len(head) + dropped :]
    assert len(head) + dropped + len(tail) == size
    assert len(tail) >= budget // 4


def test_reads_from_an_offset_are_bounded_and_skip_the_middle(tmp_path: Path) -> None:
    budget, size = 8192, 50_000
    data = stream(size)
    write(tmp_path, budget, data)
    piece, offset = logbudget.read_from(str(tmp_path), 100, limit=500)
    assert piece == data[100:600] and offset == 600
    _, dropped = logbudget.extent(str(tmp_path))
    piece, offset = logbudget.read_from(str(tmp_path), budget // 2, limit=10)
    assert piece == logbudget.marker(dropped) + data[budget // 2 + dropped :][:10]
    assert offset == budget // 2 + dropped + 10
    assert logbudget.read_from(str(tmp_path), size) == (b"", size)
    assert all(len(c) <= 64 * 1024 for c in logbudget.chunks(str(tmp_path)))


def test_a_pipe_is_pumped_into_the_budget(tmp_path: Path) -> None:
    read_fd, write_fd = logbudget.output_pipe()
    writer = logbudget.BudgetWriter(str(tmp_path), 8192)
    os.write(write_fd, b"x" * 20_000)
    os.close(write_fd)
    logbudget.drain(read_fd, writer)
    os.close(read_fd)
    writer.close()
    assert logbudget.extent(str(tmp_path))[0] == 20_000


def test_what_was_opened_is_read_whatever_happens_to_the_files(tmp_path: Path) -> None:
    """A reader opens the files at once: a clean-up that removes the directory, or a
    writer that rotates a segment away, cannot empty or prolong what it reads."""
    data = stream(50_000)
    (tmp_path / "a").mkdir()
    write(tmp_path / "a", 8192, data)
    chunks, dropped = logbudget.open_kept(str(tmp_path / "a"))
    for path in (tmp_path / "a").iterdir():
        path.unlink()
    kept = b"".join(chunks)
    assert dropped > 0 and kept.startswith(data[:4096]) and kept.endswith(data[-2048:])
    assert logbudget.marker(dropped) in kept
