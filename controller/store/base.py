"""The object-store interface: where snapshots and archived logs live."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass


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
