"""`simplectl verify RUN`: recompute a run's ledger from the database and the store.

Each entry's record is rebuilt from the database as it is now (the attempt's
row, its sandbox's template, and for an aggregated attempt the result rows and
their digest), hashed with the previous entry's hash, and compared with the
stored hash; each snapshot the ledger recorded is fetched and re-hashed. Every
attempt that ended must have its entry. Then what the report shows is checked
against the entries: each sandbox's status against the one its last attempt's
entry recorded (none records "succeeded": it is not), and a finished run's
status against its sandboxes' (flat runs; a staged run's follows its policies).
The first thing that does not match is named.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, func, select

from controller.db.schema import attempts, ledger, result_runs, runs, sandboxes
from controller.errors import NotFoundError, SimpleError
from controller.results.ledger import (
    GENESIS,
    LEGACY_ABSENT,
    RECORD_FIELDS,
    attempt_record,
    entry_hash,
    results_digest,
)
from controller.states import ACTIVE_RUN, ACTIVE_SANDBOX, SandboxStatus, run_outcome
from controller.store.base import ObjectStore, snapshot_key


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying one run's ledger."""

    run_id: str
    entries: int
    snapshots: int
    head: str | None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    def summary(self) -> str:
        if self.problem:
            return f"run {self.run_id}: ledger does NOT verify: {self.problem}"
        return (
            f"run {self.run_id}: ledger verified: {self.entries} entries, "
            f"{self.snapshots} snapshots re-hashed, head {self.head}"
        )


class _Mismatch(Exception):
    """The first entry that does not match, and why."""


def verify_run(engine: Engine, store: ObjectStore, run_id: str, max_bytes: int) -> Verdict:
    """Recompute the run's chain and re-hash its snapshots; the verdict names the first fault."""
    with engine.connect() as conn:
        if conn.execute(select(runs.c.id).where(runs.c.id == run_id)).first() is None:
            raise NotFoundError(f"unknown run {run_id}", hint="list runs with `simplectl status`")
        entries = list(
            conn.execute(select(ledger).where(ledger.c.run_id == run_id).order_by(ledger.c.seq))
        )
        database = _database_view(conn, run_id)
    checked = 0
    head = entries[-1].entry_hash if entries else None
    try:
        checked = _check_chain(entries, database, store, run_id, max_bytes)
        _check_complete(entries, database)
        _check_statuses(entries, database)
    except _Mismatch as e:
        return Verdict(run_id, len(entries), checked, head, str(e))
    return Verdict(run_id, len(entries), checked, head)


def _database_view(conn: Connection, run_id: str) -> dict[str, Any]:
    """What the database says now about every attempt of the run."""
    rows = conn.execute(
        select(
            attempts,
            sandboxes.c.template_id,
            sandboxes.c.aggregated,
            sandboxes.c.attempt.label("latest_attempt"),
        )
        .join(sandboxes, sandboxes.c.id == attempts.c.sandbox_id)
        .where(sandboxes.c.run_id == run_id)
    ).all()
    results = {
        r.sandbox_id: (r.cost, r.tokens)
        for r in conn.execute(
            select(
                result_runs.c.sandbox_id,
                func.coalesce(func.sum(result_runs.c.cost_usd), 0.0).label("cost"),
                func.coalesce(func.sum(result_runs.c.tokens_used), 0).label("tokens"),
            )
            .where(result_runs.c.run_id == run_id)
            .group_by(result_runs.c.sandbox_id)
        )
    }
    digests = {
        r.sandbox_id: results_digest(conn, r.sandbox_id)
        for r in rows
        if r.aggregated and r.latest_attempt == r.attempt
    }
    run = conn.execute(
        select(runs.c.status, runs.c.cancel_requested, runs.c.error, runs.c.plan)
        .where(runs.c.id == run_id)
    ).one()
    members = conn.execute(
        select(sandboxes.c.id, sandboxes.c.status, sandboxes.c.attempt)
        .where(sandboxes.c.run_id == run_id)
    ).all()
    return {"attempts": {(r.sandbox_id, r.attempt): r for r in rows}, "results": results,
            "digests": digests, "run": run, "sandboxes": members}


def _record_now(row: Any, stored: dict[str, Any], digests: dict[str, str | None]) -> dict[str, Any]:
    """The entry's record as the database says now. The sandbox status it recorded is
    checked against the sandbox in `_check_statuses`; the results digest is recomputed
    for the sandbox's aggregated last attempt (an earlier one's rows were replaced)."""
    latest = row.aggregated and row.latest_attempt == row.attempt
    record = attempt_record(
        sandbox_id=row.sandbox_id,
        template_id=row.template_id,
        attempt=row.attempt,
        status=row.status,
        exit_code=row.exit_code,
        cost_usd=row.cost_usd,
        tokens=row.tokens,
        snapshot_sha256=row.snapshot_sha256,
        snapshot_bytes=row.snapshot_bytes,
        sandbox_status=stored.get("sandbox_status"),
        results_digest=digests.get(row.sandbox_id) if latest else stored.get("results_digest"),
    )
    for field in LEGACY_ABSENT:  # an entry written before these were recorded
        if field not in stored:
            del record[field]
    return record


def _check_chain(
    entries: list[Any], database: dict[str, Any], store: ObjectStore, run_id: str, max_bytes: int
) -> int:
    prev, rehashed = GENESIS, 0
    for expected, entry in enumerate(entries, start=1):
        name = f"entry {entry.seq} (sandbox {entry.sandbox_id}, attempt {entry.attempt})"
        if entry.seq != expected:
            raise _Mismatch(
                f"entry {expected} is missing: the chain goes from entry {expected - 1} "
                f"to entry {entry.seq} (a ledger row was deleted)"
            )
        if entry.prev_hash != prev:
            raise _Mismatch(f"{name}: its previous hash is not entry {expected - 1}'s hash")
        row = database["attempts"].get((entry.sandbox_id, entry.attempt))
        if row is None:
            raise _Mismatch(f"{name}: the attempt is not in the database")
        record = _record_now(row, dict(entry.record or {}), database["digests"])
        _check_results(name, row, record, database["results"])
        if entry_hash(entry.seq, prev, record) != entry.entry_hash:
            raise _Mismatch(f"{name}: {_difference(entry, record, prev)}")
        if record["snapshot_sha256"] is not None:
            _check_snapshot(name, store, run_id, record, max_bytes)
            rehashed += 1
        prev = entry.entry_hash
    return rehashed


def _check_results(
    name: str, row: Any, record: dict[str, Any], results: dict[str, tuple[Any, Any]]
) -> None:
    """An aggregated attempt's result rows must add up to what its entry recorded."""
    if not (row.aggregated and row.latest_attempt == row.attempt):
        return
    cost, tokens = results.get(row.sandbox_id, (0.0, 0))
    if round(float(cost), 6) != record["cost_usd"]:
        raise _Mismatch(
            f"{name}: its aggregated result rows cost ${float(cost):.6f}, "
            f"the attempt recorded ${record['cost_usd']:.6f}"
        )
    if int(tokens) != record["tokens"]:
        raise _Mismatch(
            f"{name}: its aggregated result rows hold {int(tokens)} tokens, "
            f"the attempt recorded {record['tokens']}"
        )


def _difference(entry: Any, record: dict[str, Any], prev: str) -> str:
    """Why the recomputed hash differs: a changed field, or an edited ledger row."""
    stored = dict(entry.record or {})
    if entry_hash(entry.seq, prev, stored) != entry.entry_hash:
        return "the ledger row does not match its own hash (it was edited)"
    for field in RECORD_FIELDS:
        if stored.get(field) != record.get(field):
            return (
                f"{field} is {record.get(field)!r} in the database, "
                f"the ledger recorded {stored.get(field)!r}"
            )
    return "its recomputed hash differs from the stored one"


def _check_snapshot(
    name: str, store: ObjectStore, run_id: str, record: dict[str, Any], max_bytes: int
) -> None:
    key = snapshot_key(run_id, record["sandbox_id"], record["attempt"])
    try:
        data = store.get(key, max_bytes=max(max_bytes, record["snapshot_bytes"] or 0))
    except SimpleError as e:
        raise _Mismatch(f"{name}: cannot re-read snapshot {key}: {e.message}") from e
    if data is None:
        raise _Mismatch(f"{name}: snapshot object {key} is missing from the store")
    digest = hashlib.sha256(data).hexdigest()
    if digest != record["snapshot_sha256"] or len(data) != record["snapshot_bytes"]:
        raise _Mismatch(
            f"{name}: snapshot object {key} was replaced: it has SHA-256 {digest} "
            f"({len(data)} bytes), the ledger recorded {record['snapshot_sha256']} "
            f"({record['snapshot_bytes']} bytes)"
        )


def _check_complete(entries: list[Any], database: dict[str, Any]) -> None:
    """Every ended attempt has its entry (a deleted last entry leaves no gap in seq)."""
    recorded = {(e.sandbox_id, e.attempt) for e in entries}
    for key, row in sorted(database["attempts"].items()):
        if row.status != SandboxStatus.RUNNING and key not in recorded:
            raise _Mismatch(
                f"entry {len(entries) + 1} is missing: attempt {row.attempt} of sandbox "
                f"{row.sandbox_id} ended ({row.status}) but has no ledger entry "
                "(a ledger row was deleted)"
            )


def _check_statuses(entries: list[Any], database: dict[str, Any]) -> None:
    """Each sandbox's status against its last attempt's entry; a finished run's status
    against its sandboxes' (what the report shows, so an edit of it is found)."""
    ended = {
        (e.sandbox_id, e.attempt): (e.record or {}).get("sandbox_status") for e in entries
    }
    legacy = any("sandbox_status" not in (e.record or {}) for e in entries)
    for sandbox in database["sandboxes"]:
        recorded = ended.get((sandbox.id, sandbox.attempt))
        if recorded is not None and sandbox.status != recorded:
            raise _Mismatch(
                f"sandbox {sandbox.id} is {sandbox.status!r} in the database, the ledger "
                f"recorded its attempt {sandbox.attempt} ending it {recorded!r}"
            )
        if recorded is None and sandbox.status == SandboxStatus.SUCCEEDED and not legacy:
            raise _Mismatch(
                f"sandbox {sandbox.id} is 'succeeded' in the database, but no ledger entry "
                "records an attempt ending it so"
            )
    run = database["run"]
    statuses = [str(s.status) for s in database["sandboxes"]]
    if run.status in ACTIVE_RUN:
        return
    if any(s in ACTIVE_SANDBOX for s in statuses):
        raise _Mismatch(f"the run is {run.status!r} but a sandbox of it is still active")
    if (run.plan or {}).get("stages"):
        return  # a staged run's status follows its stages' policies (the run driver's)
    expected = run_outcome(bool(run.cancel_requested), run.error, statuses)
    if run.status != expected:
        raise _Mismatch(
            f"the run is {run.status!r} in the database, its sandboxes' statuses make it "
            f"{expected.value!r}"
        )
