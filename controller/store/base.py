"""The object-store interface: where snapshots and archived logs live."""

from __future__ import annotations

import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1024 * 1024  # what a streamed read or write holds at once


def snapshot_key(run_id: str, sandbox_id: str, attempt: int) -> str:
    """The controller chooses every snapshot's key: per run, sandbox and attempt."""
    return f"snapshots/{run_id}/{sandbox_id}/attempt-{attempt}.sqlite"


def stage_input_key(run_id: str, stage: int) -> str:
    """The SQLite file a stage's sandboxes read (SIMPLE_INPUT_URL): the previous stage's rows."""
    return f"inputs/{run_id}/stage-{stage}.sqlite"


def items_key(run_id: str, sandbox_id: str, attempt: int | None = None) -> str:
    """A batch sandbox's items: all of them, or what one retry attempt still has to run."""
    name = "items" if attempt is None else f"attempt-{attempt}"
    return f"items/{run_id}/{sandbox_id}/{name}.jsonl"


def resume_key(run_id: str, sandbox_id: str, attempt: int) -> str:
    """The validated checkpoint handed to `attempt` (SIMPLE_RESUME_URL)."""
    return f"snapshots/{run_id}/{sandbox_id}/resume-for-attempt-{attempt}.sqlite"


def log_key(run_id: str, sandbox_id: str, attempt: int) -> str:
    return f"logs/{run_id}/{sandbox_id}/attempt-{attempt}.log"


@dataclass(frozen=True)
class StoredObject:
    """One object of a listing: its key (the controller's, without the store's prefix)."""

    key: str
    size: int


class ObjectStore(ABC):
    """Bytes by key. Every call has a timeout and raises StoreError on failure."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write `data` at `key`, atomically (readers see all of it or nothing)."""

    @abstractmethod
    def get(self, key: str, max_bytes: int | None = None) -> bytes | None:
        """The bytes at `key`, or None when absent. Raises StoreError past `max_bytes`."""

    @abstractmethod
    def put_file(self, key: str, path: Path) -> None:
        """Store the file at `path` under `key`, streamed from disk; the file may be moved
        there (the caller removes it if it is still there)."""

    @abstractmethod
    def open(self, key: str, max_bytes: int | None = None) -> Iterator[bytes] | None:
        """The bytes at `key` in chunks of at most CHUNK bytes (read as they are consumed,
        never all at once), or None when absent. Raises StoreError past `max_bytes`."""

    def staging_dir(self) -> Path:
        """Where uploads are spooled before `put_file` (a local store: inside it, so the
        file is renamed into place)."""
        return Path(tempfile.gettempdir())

    def spool(self) -> tuple[int, Path]:
        """A new private temporary file in `staging_dir`: (descriptor, path)."""
        fd, name = tempfile.mkstemp(dir=self.staging_dir(), prefix=".upload-")
        return fd, Path(name)

    def download(self, key: str, max_bytes: int | None = None) -> Path | None:
        """The object at `key` copied to a new private temporary file, a chunk at a time
        (the caller removes it), or None when absent."""
        chunks = self.open(key, max_bytes=max_bytes)
        if chunks is None:
            return None
        fd, name = tempfile.mkstemp(prefix="simple-download-")
        try:
            with os.fdopen(fd, "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
        except BaseException:
            os.unlink(name)
            raise
        return Path(name)

    def put_chunks(self, key: str, chunks: Iterable[bytes]) -> int:
        """Store what `chunks` yields under `key`, through a temporary file: never more
        than one chunk in memory. The bytes stored."""
        fd, path = self.spool()
        written = 0
        try:
            with os.fdopen(fd, "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
                    written += len(chunk)
            self.put_file(key, path)
        finally:
            path.unlink(missing_ok=True)
        return written

    @abstractmethod
    def size(self, key: str) -> int | None:
        """Size in bytes, or None when absent."""

    @abstractmethod
    def list_objects(self, prefix: str) -> list[StoredObject]:
        """Every object whose key starts with `prefix`, in key order."""

    @abstractmethod
    def delete_objects(self, keys: Sequence[str]) -> None:
        """Remove these objects; a key already gone is not an error."""

    def presigned_put_url(self, key: str, expires_s: int) -> str | None:
        """A URL a sandbox may PUT `key` to without credentials; None = upload via controller."""
        return None

    def presigned_get_url(self, key: str, expires_s: int) -> str | None:
        """A URL a sandbox may GET `key` from without credentials; None = via controller."""
        return None

    def check(self) -> None:
        """Raise UnavailableError naming the reason when the store cannot be used."""
