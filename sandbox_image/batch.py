"""Batch templates: a sandbox runs many small items and keeps one result per item.

Items come from `SIMPLE_ITEMS_URL` as JSON Lines of `{"item_id", "data"}`. Each
item's data goes to the template's `entrypoint` (`module:function`, from the
template config), or, without one, to the built-in evaluator: an item passes
unless `data.raise` is set (it raises that message) or `data.expect` is false
(it fails, with `data.reason` or a default reason). An entrypoint returns a bool,
`(passed, reason)` or `{"passed": bool, "reason": str}`. An item that raises is
recorded (status `failed`, `error` set) and the loop goes on: one item never
fails the others, and a batch whose items all ran completes.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from sandbox_image.simulation import Cancelled
from sandbox_image.simulation_config import ConfigError

MAX_ITEMS = 100_000
MAX_ITEM_ID = 200
ERROR_TEXT_MAX = 4000
REASON_TEXT_MAX = 2000


class ItemsError(ValueError):
    """The items file does not follow the contract."""


@dataclass(frozen=True)
class Item:
    """One unit of work: its id and its input."""

    item_id: str
    data: Any


@dataclass(frozen=True)
class ItemResult:
    """One `items` row: `succeeded` (with a verdict) or `failed` (it raised)."""

    item_id: str
    status: str
    passed: bool | None
    reason: str | None
    error: str | None
    duration_ms: int
    data: Any


def parse_items(body: bytes) -> list[Item]:
    """JSON Lines of {"item_id", "data"}; raises ItemsError naming the line at fault."""
    items: list[Item] = []
    seen: set[str] = set()
    for number, line in enumerate(body.decode("utf-8", errors="strict").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as e:
            raise ItemsError(f"items line {number} is not JSON: {e}") from e
        item_id = entry.get("item_id") if isinstance(entry, dict) else None
        if not isinstance(item_id, str) or not 0 < len(item_id) <= MAX_ITEM_ID:
            raise ItemsError(f"items line {number}: item_id must be a string of 1 to "
                             f"{MAX_ITEM_ID} characters")
        if item_id in seen:
            raise ItemsError(f"items line {number}: item_id {item_id!r} repeats")
        seen.add(item_id)
        items.append(Item(item_id, entry.get("data")))
        if len(items) > MAX_ITEMS:
            raise ItemsError(f"more than {MAX_ITEMS} items")
    return items


class ItemFailed(Exception):
    """The built-in evaluator's error for an item whose data says `raise`."""


def builtin_evaluate(data: Any) -> tuple[bool, str | None]:
    """Pass, unless data.raise (raise it) or data.expect is false (fail with a reason)."""
    if isinstance(data, dict):
        if data.get("raise"):
            raise ItemFailed(str(data["raise"]))
        if data.get("expect") is False:
            return False, str(data.get("reason") or "data.expect is false")
    return True, None


def load_entrypoint(spec: str | None) -> Callable[[Any], Any]:
    """The callable `module:function` names, or the built-in evaluator; ConfigError if bad."""
    if spec is None:
        return builtin_evaluate
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise ConfigError(f"entrypoint {spec!r} must be module:function")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"entrypoint {spec!r} cannot be loaded: {e}") from e
    if not callable(function):
        raise ConfigError(f"entrypoint {spec!r} is not callable")
    return function


def _verdict(value: Any) -> tuple[bool, str | None]:
    if isinstance(value, bool):
        return value, None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], bool):
        return value[0], None if value[1] is None else str(value[1])
    if isinstance(value, dict) and isinstance(value.get("passed"), bool):
        reason = value.get("reason")
        return value["passed"], None if reason is None else str(reason)
    raise TypeError(f"the entrypoint returned {type(value).__name__}, not a bool, "
                    "(passed, reason) or {'passed', 'reason'}")


def evaluate(function: Callable[[Any], Any], item: Item) -> ItemResult:
    """Run one item; an exception becomes the item's error, never the batch's."""
    started = time.monotonic()
    passed: bool | None
    try:
        passed, reason = _verdict(function(item.data))
        status, error = "succeeded", None
    except Exception as e:  # one item's failure is recorded; the loop goes on
        passed, reason, status = None, None, "failed"
        error = f"{type(e).__name__}: {e}"[:ERROR_TEXT_MAX]
    return ItemResult(item.item_id, status, passed, None if reason is None else
                      reason[:REASON_TEXT_MAX], error,
                      int((time.monotonic() - started) * 1000), item.data)


class ItemSink(Protocol):
    """Stores one item's result atomically (the runtime's SQLite file and outbox)."""

    def commit_item(self, ordinal: int, result: ItemResult) -> None:
        """Store the item row, its step row and its progress event in one transaction."""


def run_items(items: Iterable[Item], function: Callable[[Any], Any], sink: ItemSink, *,
              first_ordinal: int, should_stop: Callable[[], bool],
              before: Callable[[int], None] = lambda ordinal: None) -> int:
    """Evaluate each item in order, committing each; returns how many ran.

    `before(ordinal)` may raise SimulationFailure (the fault hooks) to end the batch."""
    ran = 0
    for ordinal, item in enumerate(items, first_ordinal):
        if should_stop():
            raise Cancelled(ordinal - 1)
        before(ordinal)
        sink.commit_item(ordinal, evaluate(function, item))
        ran += 1
    return ran
