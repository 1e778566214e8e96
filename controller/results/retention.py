"""Retention: what is removed of a run once it ended more than SIMPLE_RETENTION_DAYS ago.

Removed (they served the run while it ran, or are bulky and read rarely):

- store `logs/RUN/…` — archived logs of every attempt;
- store `items/RUN/…` — batch sandboxes' item files (all items, and each retry's rest);
- store `snapshots/RUN/SANDBOX/resume-for-attempt-N.sqlite` — resume copies;
- store `inputs/RUN/…` — stage input files;
- database `events` rows of the run.

Kept, so a report, its ledger and `simplectl verify` still answer: the rows of `runs`,
`sandboxes`, `attempts`, `ledger`, `observations`, the aggregated results
(`result_runs`, `result_steps`, `result_items`) and the snapshot objects
`snapshots/RUN/SANDBOX/attempt-N.sqlite` (the ledger re-hashes them).

A run is purged once (`runs.purged_at`); the work goes in batches of runs, and event rows
are deleted a bounded number per transaction, so a large backlog never holds a long lock.
Store objects go first and the run is marked last: a gc cut short is redone next time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, delete, func, select, tuple_, update

from controller import metrics
from controller.db.schema import events, runs
from controller.states import ACTIVE_RUN
from controller.store.base import ObjectStore, StoredObject

logger = logging.getLogger(__name__)

RUN_BATCH = 50  # runs per round: listed, cleared and marked together
ROW_BATCH = 5_000  # event rows deleted per transaction
LISTED_RUNS = 100  # run ids a result names (the count is always whole)
RESUME_COPY = "resume-for-attempt-"
KINDS = ("logs", "items", "resume", "inputs")
KEPT = (
    "runs, sandboxes, attempts, ledger and observations rows; aggregated results "
    "(result_runs, result_steps, result_items); snapshot objects; reports"
)


def run_prefixes(run_id: str) -> dict[str, str]:
    """Where each kind of a run's removable objects lives (store/base.py names the keys)."""
    return {
        "logs": f"logs/{run_id}/",
        "items": f"items/{run_id}/",
        "resume": f"snapshots/{run_id}/",  # only the resume copies: see `removable`
        "inputs": f"inputs/{run_id}/",
    }


def removable(kind: str, stored: StoredObject) -> bool:
    """Under the `resume` prefix only resume copies go; snapshots themselves stay."""
    return kind != "resume" or stored.key.rpartition("/")[2].startswith(RESUME_COPY)


@dataclass
class Freed:
    objects: int = 0
    bytes: int = 0


@dataclass
class GcResult:
    """What one gc removed (or, dry, would remove)."""

    dry_run: bool
    retention_days: int
    cutoff: datetime | None  # runs that ended before this; None when retention is off
    runs: int = 0
    run_ids: list[str] = field(default_factory=list)
    event_rows: int = 0
    by_kind: dict[str, Freed] = field(default_factory=lambda: {k: Freed() for k in KINDS})
    complete: bool = True  # False: stopped at its limit; the next gc goes on

    @property
    def objects(self) -> int:
        return sum(f.objects for f in self.by_kind.values())

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.by_kind.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "retention_days": self.retention_days,
            "cutoff": self.cutoff.isoformat() if self.cutoff else None,
            "runs": self.runs,
            "run_ids": self.run_ids,
            "objects": self.objects,
            "bytes": self.bytes,
            "event_rows": self.event_rows,
            "by_kind": {k: vars(f) for k, f in self.by_kind.items()},
            "complete": self.complete,
            "kept": KEPT,
        }

    def summary(self) -> str:
        verb = "would free" if self.dry_run else "freed"
        if self.cutoff is None:
            return "retention is off (SIMPLE_RETENTION_DAYS=0): nothing removed"
        return (
            f"{verb} {self.objects} store objects ({self.bytes} bytes) and {self.event_rows} "
            f"event rows of {self.runs} runs ended before {self.cutoff:%Y-%m-%d %H:%M} UTC"
            + ("" if self.complete else "; more remain, run gc again")
        )


def collect_garbage(
    engine: Engine,
    store: ObjectStore,
    *,
    now: datetime,
    retention_days: int,
    dry_run: bool = False,
    max_runs: int | None = None,
    run_batch: int = RUN_BATCH,
    row_batch: int = ROW_BATCH,
    should_stop: Callable[[], bool] = lambda: False,
) -> GcResult:
    """Remove (or, `dry_run`, count) what retention frees of runs ended `retention_days`
    before `now`: at most `max_runs` runs, stopping between batches when `should_stop`."""
    if retention_days <= 0:
        return GcResult(dry_run, retention_days, None)
    result = GcResult(dry_run, retention_days, now - timedelta(days=retention_days))
    assert result.cutoff is not None
    after: tuple[datetime, str] | None = None
    while True:
        limit = run_batch if max_runs is None else min(run_batch, max_runs - result.runs)
        if limit <= 0 or should_stop():
            result.complete = not _expired(engine, result.cutoff, after, 1)
            return result
        batch = _expired(engine, result.cutoff, after, limit)
        if not batch:
            return result
        after = batch[-1]
        ids = [run_id for _, run_id in batch]
        _clear_store(store, ids, result, dry_run)
        result.event_rows += _clear_events(engine, ids, row_batch, dry_run)
        if not dry_run:
            with engine.begin() as conn:
                conn.execute(update(runs).where(runs.c.id.in_(ids)).values(purged_at=now))
        result.runs += len(ids)
        result.run_ids.extend(ids[: max(0, LISTED_RUNS - len(result.run_ids))])
        logger.info("retention: %s %d runs (%s…)", "would purge" if dry_run else "purged",
                    len(ids), ids[0])


def _expired(
    engine: Engine, cutoff: datetime, after: tuple[datetime, str] | None, limit: int
) -> list[tuple[datetime, str]]:
    """The next runs (oldest end first) that ended before `cutoff` and are not purged."""
    query = (
        select(runs.c.finished_at, runs.c.id)
        .where(
            runs.c.finished_at < cutoff,
            runs.c.purged_at.is_(None),
            runs.c.status.not_in([str(s) for s in ACTIVE_RUN]),
        )
        .order_by(runs.c.finished_at, runs.c.id)
        .limit(limit)
    )
    if after is not None:  # keyset: a dry run marks nothing, so it pages on
        query = query.where(tuple_(runs.c.finished_at, runs.c.id) > tuple_(*after))
    with engine.connect() as conn:
        return [(r.finished_at, r.id) for r in conn.execute(query)]


def _clear_store(store: ObjectStore, run_ids: list[str], result: GcResult, dry_run: bool) -> None:
    for run_id in run_ids:
        found_all: list[StoredObject] = []
        for kind, prefix in run_prefixes(run_id).items():
            found = [o for o in store.list_objects(prefix) if removable(kind, o)]
            result.by_kind[kind].objects += len(found)
            result.by_kind[kind].bytes += sum(o.size for o in found)
            found_all.extend(found)
        doomed = [o.key for o in found_all]
        if doomed and not dry_run:
            store.delete_objects(doomed)
            metrics.GC_OBJECTS.inc(len(doomed))
            metrics.GC_BYTES.inc(sum(o.size for o in found_all))


def _clear_events(engine: Engine, run_ids: list[str], row_batch: int, dry_run: bool) -> int:
    """Delete the runs' event rows, `row_batch` per transaction; how many there were."""
    if dry_run:
        with engine.connect() as conn:
            count = conn.execute(
                select(func.count()).select_from(events).where(events.c.run_id.in_(run_ids))
            ).scalar()
        return int(count or 0)
    removed = 0
    while True:
        with engine.begin() as conn:
            ids = list(
                conn.execute(
                    select(events.c.id).where(events.c.run_id.in_(run_ids)).limit(row_batch)
                ).scalars()
            )
            if ids:
                conn.execute(delete(events).where(events.c.id.in_(ids)))
        removed += len(ids)
        metrics.GC_EVENT_ROWS.inc(len(ids))
        if len(ids) < row_batch:
            return removed
