"""Batch templates: items, their limits, and the split into sandboxes. Pure, except the
one reader of an items file.

A template (or an ad-hoc request) may carry items, `{"item_id", "data"}` each;
they run in sandboxes of at most `batch_size` items. Limits bound what a
catalog file or a client can make the controller hold: items per run, bytes
per item's data and per run, and the batch size.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.errors import InputError

DEFAULT_BATCH_SIZE = 100  # the seed's "max traces per batch"
MAX_BATCH_SIZE = 1000
MAX_RUN_ITEMS = 10_000
MAX_ITEM_DATA_BYTES = 512 << 10  # under the snapshot reader's longest value (1 MB)
MAX_RUN_ITEMS_BYTES = 32 << 20
ITEM_ID = re.compile(r"^[A-Za-z0-9_.:/@+=-]{1,200}$")
ENTRYPOINT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class WorkItem:
    """One item: its id (unique in its list) and its JSON data."""

    item_id: str
    data: Any = field(compare=False, hash=False)

    def to_json(self) -> str:
        """One line of the items file the sandbox reads."""
        return json.dumps({"item_id": self.item_id, "data": self.data}, sort_keys=True)


def check_items(raw: Sequence[Any], where: str) -> tuple[WorkItem, ...]:
    """Validate a list of {"item_id", "data"}; InputError names the entry and what to fix."""
    if len(raw) > MAX_RUN_ITEMS:
        raise InputError(f"{where}: {len(raw)} items, over the {MAX_RUN_ITEMS} allowed per run",
                         hint="split the list over several runs", field="items")
    items: list[WorkItem] = []
    seen: set[str] = set()
    total = 0
    for index, entry in enumerate(raw):
        label = f"{where}: item {index + 1}"
        if not isinstance(entry, dict) or set(entry) - {"item_id", "data"}:
            raise InputError(f"{label} must be an object with `item_id` and `data` only",
                             field="items")
        item_id = entry.get("item_id")
        if not isinstance(item_id, str) or not ITEM_ID.match(item_id):
            raise InputError(f"{label}: item_id {item_id!r:.60} must be 1-200 characters of "
                             "letters, digits and _.:/@+=-", field="items")
        if item_id in seen:
            raise InputError(f"{label}: item_id {item_id!r} repeats", field="items")
        seen.add(item_id)
        size = len(json.dumps(entry.get("data")))
        if size > MAX_ITEM_DATA_BYTES:
            raise InputError(f"{label} ({item_id}): data is {size} bytes, over the "
                             f"{MAX_ITEM_DATA_BYTES} allowed", field="items")
        total += size
        if total > MAX_RUN_ITEMS_BYTES:
            raise InputError(f"{where}: items are over {MAX_RUN_ITEMS_BYTES} bytes in all",
                             hint="split the list over several runs", field="items")
        items.append(WorkItem(item_id, entry.get("data")))
    return tuple(items)


def read_items_file(path: Path) -> tuple[WorkItem, ...]:
    """A JSON Lines file of items; InputError names the file and the line at fault."""
    try:
        size = path.stat().st_size
        if size > MAX_RUN_ITEMS_BYTES + MAX_RUN_ITEMS * 300:
            raise InputError(f"{path}: {size} bytes, too big for an items file", field="items")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read items file {path}: {e}", field="items") from e
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise InputError(f"{path}: line {number} is not JSON: {e.msg}",
                                 hint='one {"item_id": ..., "data": ...} per line',
                                 field="items") from e
    return check_items(entries, str(path))


def check_batch_size(value: int | None) -> int:
    """The batch size to use; InputError when out of range."""
    if value is None:
        return DEFAULT_BATCH_SIZE
    if isinstance(value, bool) or not isinstance(value, int) or not (
            1 <= value <= MAX_BATCH_SIZE):
        raise InputError(f"batch_size must be an integer from 1 to {MAX_BATCH_SIZE}, got "
                         f"{value!r}", field="batch_size")
    return value


def split(items: Sequence[WorkItem], batch_size: int) -> list[tuple[WorkItem, ...]]:
    """Consecutive batches of at most `batch_size` items, sizes as even as possible."""
    if not items:
        return []
    count = -(-len(items) // batch_size)
    base, extra = divmod(len(items), count)
    batches, start = [], 0
    for index in range(count):
        size = base + (1 if index < extra else 0)
        batches.append(tuple(items[start:start + size]))
        start += size
    return batches


def items_jsonl(items: Iterable[WorkItem]) -> bytes:
    """The items file a sandbox reads from SIMPLE_ITEMS_URL."""
    return "".join(item.to_json() + "\n" for item in items).encode()
