"""Reruns: what a new run of an ended run's failures (or of all of it) consists of.

`--failed` (the default) takes the sandboxes that `failed`, timed out, were `lost` or
ran out of memory (`oom`); of a batch template, the items without a passing result
(failed, errored or never reported) of its sandboxes that ran (failed or succeeded).
Sandboxes `cancelled` or `skipped` are not failures: `--all` runs every sandbox again.

The rerun is planned like any run, over the catalog as it is now: its budget (the
original's unless given), priority, parallelism and seed carry over, so the same budget
and plan checks apply. A batch template's items come from the original's item files in
the store (ad-hoc items included); a staged run is rerun flat, its templates in one
stage. The new run's `rerun_of` names the original; `request.rerun` says what was taken.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from sqlalchemy import Connection, Engine, select

from controller.catalog.batches import (
    MAX_RUN_ITEMS,
    MAX_RUN_ITEMS_BYTES,
    WorkItem,
    check_items,
)
from controller.catalog.templates import Catalog
from controller.db.plans import run_with_plan
from controller.db.schema import result_items, sandboxes
from controller.errors import ConflictError, NotFoundError, UnknownNameError
from controller.planning.model import PlanRequest, Priority
from controller.states import ACTIVE_RUN, FAILED_SANDBOX, SandboxStatus
from controller.store.base import ObjectStore, items_key

Scope = Literal["failed", "all"]
ITEMS_FILE_MAX_BYTES = MAX_RUN_ITEMS_BYTES + MAX_RUN_ITEMS * 300  # data and the lines' JSON
# A batch sandbox whose items are looked at under --failed: it ran (cancelled and
# skipped ones did not, and non-batch ones in those states are not taken either).
_RAN = FAILED_SANDBOX | {SandboxStatus.SUCCEEDED}


@dataclass(frozen=True)
class Rerun:
    """A rerun ready for `create_run`: the catalog to plan it over, the request, the body."""

    original: str
    catalog: Catalog  # the catalog, with each rerun batch template's items left to run
    request: PlanRequest
    body: dict[str, Any]  # kept as the new run's `request`
    seed: int


def plan_rerun(
    engine: Engine,
    store: ObjectStore,
    catalog: Catalog,
    run_id: str,
    scope: Scope = "failed",
    budget_usd: float | None = None,
    max_parallel: int | None = None,
) -> Rerun:
    """What rerunning `run_id` starts. NotFoundError: no such run; ConflictError: it has
    not ended, or (`failed`) nothing of it failed; UnknownNameError: a template is gone."""
    with engine.connect() as conn:
        run = run_with_plan(conn, run_id)
        if run is None:
            raise NotFoundError(f"unknown run {run_id}", hint="list runs with `simplectl status`")
        if run.status in ACTIVE_RUN:
            raise ConflictError(
                f"run {run_id} is still {run.status}: only a run that has ended can be rerun",
                hint=f"wait for it (`simplectl status {run_id}`) or cancel it "
                f"(`simplectl cancel {run_id}`), then rerun it",
            )
        rows = conn.execute(
            select(sandboxes.c.id, sandboxes.c.template_id, sandboxes.c.status,
                   sandboxes.c.spec)
            .where(sandboxes.c.run_id == run_id)
            .order_by(sandboxes.c.position)
        ).all()
        passed = _passed_items(conn, run_id) if scope == "failed" else set()
    taken: dict[str, list[WorkItem] | None] = {}  # template -> items left (None: no items)
    from_sandboxes: list[str] = []
    for row in rows:
        if scope == "failed" and row.status not in (_RAN if row.spec.get("items")
                                                    else FAILED_SANDBOX):
            continue
        if not row.spec.get("items"):
            taken.setdefault(row.template_id, None)
            from_sandboxes.append(row.id)
            continue
        left = [i for i in _items_of(store, run_id, row.id) if (row.id, i.item_id) not in passed]
        if left:
            batch = taken.setdefault(row.template_id, [])
            assert batch is not None
            batch.extend(left)
            from_sandboxes.append(row.id)
    if not taken:
        raise ConflictError(
            f"run {run_id} ({run.status}) has nothing to rerun: no sandbox failed, timed out, "
            "was lost or ran out of memory, and every item of its batch sandboxes passed",
            hint=f"`simplectl rerun {run_id} --all` runs every sandbox again",
        )
    return _rerun(run, catalog, scope, taken, from_sandboxes, budget_usd, max_parallel)


def _rerun(
    run: Any,
    catalog: Catalog,
    scope: Scope,
    taken: dict[str, list[WorkItem] | None],
    from_sandboxes: list[str],
    budget_usd: float | None,
    max_parallel: int | None,
) -> Rerun:
    gone = [t for t in taken if t not in catalog.templates]
    if gone:
        raise UnknownNameError(
            f"cannot rerun {run.id}: templates {', '.join(gone[:5])} are no longer in the catalog",
            hint="add them back (SIMPLE_CATALOG_DIRS / --catalog), or run what is left by name",
            field="templates",
        )
    templates = dict(catalog.templates)
    for template_id, items in taken.items():
        if items is not None:
            templates[template_id] = replace(templates[template_id], items=tuple(items))
    original = run.request or {}
    budget = budget_usd if budget_usd is not None else run.budget_usd
    priority = (run.plan or {}).get("priority")
    request = PlanRequest(
        templates=tuple(taken),
        budget_usd=budget,
        priority=Priority(priority) if priority else None,
        max_parallel=max_parallel or original.get("max_parallel"),
        batch_size=original.get("batch_size"),
    )
    item_count = sum(len(i) for i in taken.values() if i is not None)
    seed = int(original.get("seed") or 0)
    body: dict[str, Any] = {
        "templates": list(taken),
        "budget_usd": budget,
        "priority": priority,
        "max_parallel": request.max_parallel,
        "batch_size": request.batch_size,
        "seed": seed,
        "confirm_over": bool(original.get("confirm_over")),
        "rerun": {"of": run.id, "scope": scope, "sandboxes": from_sandboxes, "items": item_count},
    }
    return Rerun(run.id, replace(catalog, templates=templates), request, body, seed)


def _passed_items(conn: Connection, run_id: str) -> set[tuple[str, str]]:
    """(sandbox, item) of every item of the run with a passing result."""
    t = result_items
    return {
        (r.sandbox_id, r.item_id)
        for r in conn.execute(
            select(t.c.sandbox_id, t.c.item_id).where(
                t.c.run_id == run_id, t.c.status == "succeeded", t.c.passed == 1
            )
        )
    }


def _items_of(store: ObjectStore, run_id: str, sandbox_id: str) -> tuple[WorkItem, ...]:
    """The items a batch sandbox was given, from its items file in the store."""
    data = store.get(items_key(run_id, sandbox_id), max_bytes=ITEMS_FILE_MAX_BYTES)
    if data is None:
        raise ConflictError(
            f"the items of sandbox {sandbox_id} are no longer in the store (its run ended "
            "more than SIMPLE_RETENTION_DAYS ago and was purged)",
            hint="run the template again by name, with its items",
        )
    entries = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    return check_items(entries, f"items of sandbox {sandbox_id}")
