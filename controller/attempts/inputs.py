"""A new attempt's optional inputs: its items (batch templates) and a checkpoint to resume.

On a retry, the latest checkpoint of the earlier attempts (their snapshot keys hold
the last snapshot each one uploaded) is validated like a snapshot; the first that
passes, newest first, is copied to the new attempt's resume key and handed out as
`SIMPLE_RESUME_URL`, and only the items without a result in it are handed out as
`SIMPLE_ITEMS_URL`. A missing or rejected checkpoint means starting over; the
reasons are kept on the attempt (`resume_note`). This runs when an attempt is
started, in the background, not in the reconciler's pass.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.attempts.urls import AttemptUrls, input_key
from controller.errors import SimpleError, SnapshotRejected, StoreError
from controller.intake.aggregator import SnapshotRows, read_snapshot_file
from controller.settings import Settings
from controller.store.base import ObjectStore, items_key, snapshot_key

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checkpoint:
    """A validated checkpoint: from which attempt, its last step, cost and finished items."""

    attempt: int
    step: int
    cost_usd: float
    item_ids: frozenset[str]
    path: Path = field(repr=False)  # a private copy, moved to the resume key or removed


@dataclass(frozen=True)
class Inputs:
    """What the attempt is given, and what the controller records about it."""

    items_url: str | None = None
    resume_url: str | None = None
    checkpoint: Checkpoint | None = None
    note: str | None = None


def find_checkpoint(store: ObjectStore, settings: Settings, run_id: str, sandbox_id: str,
                    attempt: int) -> tuple[Checkpoint | None, list[str]]:
    """The newest valid checkpoint of attempts before `attempt`, and why others were not."""
    reasons: list[str] = []
    for earlier in range(attempt - 1, 0, -1):
        checkpoint: Checkpoint | None = None
        key = snapshot_key(run_id, sandbox_id, earlier)
        path = None
        try:
            path = store.download(key, max_bytes=settings.snapshot_max_bytes)
            if path is None:
                reasons.append(f"attempt {earlier} left no checkpoint")
                continue
            rows = read_snapshot_file(str(path), settings.snapshot_max_bytes)
            checkpoint = _checked(rows, sandbox_id, earlier, path)
        except SnapshotRejected as e:
            reasons.append(f"checkpoint of attempt {earlier} rejected: {e.message}")
            continue
        except StoreError:
            raise
        except SimpleError as e:  # e.g. over the size limit
            reasons.append(f"checkpoint of attempt {earlier} not read: {e.message}")
            continue
        finally:
            if path is not None and (checkpoint is None or checkpoint.path != path):
                path.unlink(missing_ok=True)
        if checkpoint.step == 0:
            checkpoint.path.unlink(missing_ok=True)
            reasons.append(f"checkpoint of attempt {earlier} has no finished step")
            continue
        return checkpoint, reasons
    return None, reasons


def _checked(rows: SnapshotRows, sandbox_id: str, attempt: int, path: Path) -> Checkpoint:
    runs = [r for r in rows.runs if r["run_id"] == sandbox_id]
    if len(runs) != 1:
        raise SnapshotRejected(f"it has no `runs` row for {sandbox_id}")
    steps = sorted(s[1] for s in rows.steps if s[0] == sandbox_id)
    if steps != list(range(1, len(steps) + 1)):
        raise SnapshotRejected("its steps are not exactly 1..k")
    return Checkpoint(attempt, len(steps), float(runs[0]["cost_usd"] or 0),
                      frozenset(str(i[0]) for i in rows.items), path)


def prepare_inputs(store: ObjectStore, urls: AttemptUrls, settings: Settings, row: Any,
                   attempt: int, token_hash: str) -> Inputs:
    """Write the attempt's inputs to the store and make their URLs; raises StoreError."""
    checkpoint: Checkpoint | None = None
    reasons: list[str] = []
    if attempt > 1:
        checkpoint, reasons = find_checkpoint(store, settings, row.run_id, row.id, attempt)
    note = "; ".join(reasons) or None
    if attempt > 1 and checkpoint is None:
        note = f"starting over: {note or 'no earlier checkpoint'}"
        logger.warning("sandbox %s attempt %d %s", row.id, attempt, note)
    resume_url = None
    if checkpoint is not None:
        try:
            store.put_file(input_key("resume", row.run_id, row.id, attempt), checkpoint.path)
        finally:
            checkpoint.path.unlink(missing_ok=True)
        resume_url = urls.input("resume", row.run_id, row.id, attempt, token_hash,
                                row.spec["timeout_s"])
        logger.info("sandbox %s attempt %d resumes after step %d of attempt %d", row.id,
                    attempt, checkpoint.step, checkpoint.attempt)
    items_url = None
    if row.spec.get("items"):
        _write_items(store, row, attempt, checkpoint)
        items_url = urls.input("items", row.run_id, row.id, attempt, token_hash,
                               row.spec["timeout_s"])
    return Inputs(items_url, resume_url, checkpoint, note)


def _write_items(store: ObjectStore, row: Any, attempt: int,
                 checkpoint: Checkpoint | None) -> None:
    """The attempt's items file: all items less those the checkpoint has a result for,
    streamed line by line from the store to the store."""
    everything = store.open(items_key(row.run_id, row.id))
    if everything is None:
        raise StoreError(f"the items of sandbox {row.id} are missing from the store",
                         transient=False)
    done = checkpoint.item_ids if checkpoint else frozenset()
    lines = (line for line in _lines(everything) if not done or _item_id(line) not in done)
    store.put_chunks(input_key("items", row.run_id, row.id, attempt), lines)


def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The lines (newline kept) of a stream of chunks."""
    rest = b""
    for chunk in chunks:
        rest += chunk
        *whole, rest = rest.split(b"\n")
        for line in whole:
            yield line + b"\n"
    if rest:
        yield rest


def _item_id(line: bytes) -> str:
    return str(json.loads(line)["item_id"])
