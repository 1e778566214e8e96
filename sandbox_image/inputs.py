"""The contract's optional inputs, read before the workload starts.

- `SIMPLE_RESUME_URL`: an earlier attempt's checkpoint, restored into this attempt's
  snapshot (a checkpoint that does not fit is ignored: the attempt starts over);
- `SIMPLE_INPUT_URL`: a previous stage's rows, kept in the snapshot (a template with
  `gather` set needs it);
- `SIMPLE_ITEMS_URL`: a batch template's items, less those the checkpoint has done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from sandbox_image.batch import (
    MAX_ITEMS,
    Item,
    ItemsError,
    builtin_evaluate,
    load_entrypoint,
    parse_items,
)
from sandbox_image.contract import SandboxEnv
from sandbox_image.fetch import fetch_bytes
from sandbox_image.gather import (
    INPUT_SCHEMA_SQL,
    MAX_INPUT_BYTES,
    InputError,
    read_input,
    record_input,
)
from sandbox_image.resume import MAX_CHECKPOINT_BYTES, Restored, ResumeError, restore
from sandbox_image.retry import Deadline
from sandbox_image.snapshot import SnapshotStore

logger = logging.getLogger(__name__)

INPUT_FETCH_BUDGET_S = 120.0
MAX_ITEMS_BYTES = 256 << 20


@dataclass
class Inputs:
    """What the optional inputs gave this attempt (nothing, when none was set)."""

    restored: Restored | None = None  # the checkpoint resumed from
    resume_error: str | None = None  # why a checkpoint given was not used
    items: list[Item] | None = None  # a batch template's items still to do
    entrypoint: Callable[[Any], Any] = builtin_evaluate  # what evaluates one item
    gathered: dict[str, int] = field(default_factory=dict)  # counts of a stage's input


def fetch_inputs(env: SandboxEnv, store: SnapshotStore, deadline: Deadline) -> Inputs:
    """Fetch and apply every input `env` names; raises FetchError, ItemsError,
    ConfigError or InputError saying what is wrong."""
    inputs = Inputs()
    with httpx.Client() as client:
        if env.resume_url:
            _resume(inputs, env, store, fetch_bytes(
                client, env.resume_url, "checkpoint", MAX_CHECKPOINT_BYTES, deadline))
        if env.input_url:
            inputs.gathered = _gather(store, fetch_bytes(
                client, env.input_url, "stage input", MAX_INPUT_BYTES, deadline))
        elif env.template_config.get("gather"):
            raise InputError("this template gathers a previous stage's results, but "
                             "SIMPLE_INPUT_URL is not set: run it as a later stage")
        if env.items_url:
            store.use_fast_commits()
            _take_items(inputs, env, fetch_bytes(
                client, env.items_url, "items", MAX_ITEMS_BYTES, deadline))
    return inputs


def _resume(inputs: Inputs, env: SandboxEnv, store: SnapshotStore, checkpoint: bytes) -> None:
    try:
        restored = restore(store, checkpoint, env.sandbox_id)
        if restored.step and restored.world is None and not env.items_url:
            raise ResumeError("checkpoint has no world state for its last step")
    except ResumeError as e:
        inputs.resume_error = str(e)
        logger.warning("not resuming, starting over: %s", e)
        store.reset()
        return
    inputs.restored = restored
    logger.info("resuming after step %d (%d items done) from an earlier attempt's "
                "checkpoint", restored.step, len(restored.item_ids))


def _gather(store: SnapshotStore, data: bytes) -> dict[str, int]:
    """A later stage: read the previous stage's rows and keep them in the snapshot."""
    stage_input = read_input(data)
    store.ensure_schema(INPUT_SCHEMA_SQL)
    with store.transaction() as conn:
        record_input(conn, stage_input)
    logger.info("gathered the previous stage: %d sandboxes, %d runs",
                len(stage_input.sandboxes), len(stage_input.runs))
    return {"input_sandboxes": len(stage_input.sandboxes), "input_runs": len(stage_input.runs)}


def _take_items(inputs: Inputs, env: SandboxEnv, data: bytes) -> None:
    """A batch template: the items not done yet, and what evaluates each."""
    items = parse_items(data)
    done = inputs.restored.item_ids if inputs.restored else set()
    inputs.items = [i for i in items if i.item_id not in done]
    inputs.entrypoint = load_entrypoint(env.template_config.get("entrypoint"))
    logger.info("batch: %d items (%d done before)", len(inputs.items), len(done))
    if len(inputs.items) + len(done) > MAX_ITEMS:
        raise ItemsError(f"more than {MAX_ITEMS} items")
