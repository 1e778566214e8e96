"""The local store's streamed transfers (issue 25, finding 5): uploads spooled inside the
store and renamed into place, reads in chunks, never a whole object in memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.errors import PayloadTooLargeError
from controller.store.base import CHUNK
from controller.store.local import LocalStore


def test_put_chunks_and_open_stream_an_object(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    data = bytes(range(256)) * 20_000
    pieces = (data[i : i + 70_000] for i in range(0, len(data), 70_000))
    assert store.put_chunks("logs/r/s/attempt-1.log", pieces) == len(data)
    chunks = store.open("logs/r/s/attempt-1.log")
    assert chunks is not None
    read = list(chunks)
    assert b"".join(read) == data and max(map(len, read)) <= CHUNK
    assert store.open("logs/none.log") is None
    with pytest.raises(PayloadTooLargeError):
        store.open("logs/r/s/attempt-1.log", max_bytes=len(data) - 1)
    assert not list(store.staging_dir().iterdir())  # the spool was moved into place


def test_put_file_moves_a_spooled_upload_into_place(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    fd, path = store.spool()
    with open(fd, "wb") as handle:
        handle.write(b"SQLite format 3\x00")
    store.put_file("snapshots/r/s/attempt-1.sqlite", path)
    assert not path.exists()
    assert store.get("snapshots/r/s/attempt-1.sqlite") == b"SQLite format 3\x00"
    downloaded = store.download("snapshots/r/s/attempt-1.sqlite")
    assert downloaded is not None and downloaded.read_bytes() == b"SQLite format 3\x00"
    downloaded.unlink()
