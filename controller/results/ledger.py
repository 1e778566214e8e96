"""The ledger: a hash chain per run, one entry per ended attempt.

Each entry hashes a canonical JSON of `{"seq", "prev", "record"}`, where
`record` is what the database holds about the ended attempt (sandbox, template,
attempt, state, exit code, cost, tokens, and the SHA-256 and size of its
snapshot object as it was fetched), the status its sandbox was left in, and a
digest of the result rows and items it loaded (`results_digest`); `prev` is the
previous entry's hash.
Changing any recorded value, dropping an entry or replacing a snapshot object
breaks the chain where it happened; `controller.results.verify` finds it.

Appending is concurrency-safe: the run's row is written (a row lock on
PostgreSQL, the write lock on SQLite) before the head is read, and the unique
`(run_id, seq)` constraint refuses a second entry at the same place.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, insert, select, update

from controller.db.schema import ledger, result_items, result_runs, result_steps, runs
from controller.errors import NotFoundError

GENESIS = "0" * 64
RECORD_FIELDS = (
    "sandbox_id",
    "template_id",
    "attempt",
    "status",
    "exit_code",
    "cost_usd",
    "tokens",
    "snapshot_sha256",
    "snapshot_bytes",
    "sandbox_status",
    "results_digest",
)
LEGACY_ABSENT = ("sandbox_status", "results_digest")
"""Fields that entries written before 0017 do not have (their records are rebuilt without)."""


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def attempt_record(
    *,
    sandbox_id: str,
    template_id: str,
    attempt: int,
    status: str,
    exit_code: int | None,
    cost_usd: float | None,
    tokens: int | None,
    snapshot_sha256: str | None,
    snapshot_bytes: int | None,
    sandbox_status: str | None = None,
    results_digest: str | None = None,
) -> dict[str, Any]:
    """What an entry records about an ended attempt. Pure; numbers normalised.
    `sandbox_status`: what the attempt's end left its sandbox in (None before a retry)."""
    return {
        "sandbox_id": sandbox_id,
        "template_id": template_id,
        "attempt": int(attempt),
        "status": str(status),
        "exit_code": None if exit_code is None else int(exit_code),
        "cost_usd": round(float(cost_usd or 0.0), 6),
        "tokens": int(tokens or 0),
        "snapshot_sha256": snapshot_sha256,
        "snapshot_bytes": None if snapshot_bytes is None else int(snapshot_bytes),
        "sandbox_status": None if sandbox_status is None else str(sandbox_status),
        "results_digest": results_digest,
    }


def results_digest(conn: Connection, sandbox_id: str) -> str | None:
    """SHA-256 over the sandbox's aggregated result rows, steps and items, in key order,
    numbers normalised (the same on SQLite and PostgreSQL); None when it has none."""
    digest, found = hashlib.sha256(), False
    for table, order in (
        (result_runs, (result_runs.c.snapshot_run_id,)),
        (result_steps, (result_steps.c.snapshot_run_id, result_steps.c.step)),
        (result_items, (result_items.c.item_id,)),
    ):
        columns = [c for c in table.c if c.name not in ("sandbox_id", "run_id")]
        query = select(*columns).where(table.c.sandbox_id == sandbox_id).order_by(*order)
        digest.update(f"\0{table.name}\0".encode())
        for row in conn.execute(query):
            found = True
            digest.update(canonical_json([_plain(v) for v in row]).encode() + b"\n")
    return digest.hexdigest() if found else None


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 9)
    return value


def entry_hash(seq: int, prev_hash: str, record: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the entry's place, predecessor and record."""
    body = canonical_json({"seq": seq, "prev": prev_hash, "record": record})
    return hashlib.sha256(body.encode()).hexdigest()


# Built once: an append runs three statements per ended attempt.
_LOCK_RUN = update(runs).where(runs.c.id == bindparam("b_run_id")).values(status=runs.c.status)
_HEAD = (
    select(ledger.c.seq, ledger.c.entry_hash)
    .where(ledger.c.run_id == bindparam("b_run_id"))
    .order_by(ledger.c.seq.desc())
    .limit(1)
)
_APPEND = insert(ledger)


def append_entry(
    conn: Connection, run_id: str, record: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """Append `record` to the run's chain, inside the caller's transaction."""
    # Serialise appends per run: writing the run's row locks it (PostgreSQL) and takes
    # the database's write lock (SQLite) before the head is read, so the second of two
    # finishers waits here, then sees the first one's entry as the head.
    conn.execute(_LOCK_RUN, {"b_run_id": run_id})
    head = conn.execute(_HEAD, {"b_run_id": run_id}).first()
    seq, prev = (head.seq + 1, head.entry_hash) if head else (1, GENESIS)
    digest = entry_hash(seq, prev, record)
    entry = {
        "run_id": run_id,
        "seq": seq,
        "sandbox_id": record["sandbox_id"],
        "attempt": record["attempt"],
        "prev_hash": prev,
        "entry_hash": digest,
        "record": record,
        "created_at": now,
    }
    conn.execute(_APPEND, entry)
    return entry


def ledger_head(conn: Connection, run_id: str) -> str | None:
    """The hash of the run's last entry, or None before any attempt ended."""
    return conn.execute(
        select(ledger.c.entry_hash)
        .where(ledger.c.run_id == run_id)
        .order_by(ledger.c.seq.desc())
        .limit(1)
    ).scalar()


def read_ledger(engine: Engine, run_id: str) -> dict[str, Any]:
    """The run's chain, oldest first, with its head (GET /v1/runs/{id}/ledger)."""
    with engine.connect() as conn:
        if conn.execute(select(runs.c.id).where(runs.c.id == run_id)).first() is None:
            raise NotFoundError(f"unknown run {run_id}", hint="list runs with `simplectl status`")
        rows = conn.execute(
            select(ledger).where(ledger.c.run_id == run_id).order_by(ledger.c.seq)
        ).all()
    entries = [
        {
            "seq": r.seq,
            "sandbox_id": r.sandbox_id,
            "attempt": r.attempt,
            "prev_hash": r.prev_hash,
            "entry_hash": r.entry_hash,
            "record": r.record,
            "created_at": r.created_at.isoformat(),
        }
        for r in rows
    ]
    return {
        "run_id": run_id,
        "entries": entries,
        "count": len(entries),
        "ledger_head": entries[-1]["entry_hash"] if entries else None,
    }
