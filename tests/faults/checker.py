"""The fault suite's checker: what the sandboxes sent against what the controller stored.

Evidence comes from two sides that do not share code: each sandbox attempt's own outbox
table (in the snapshot it uploaded: every event it appended, and which the controller
acknowledged) and the controller's database (the events table, the sandboxes' final
states, the attempts), plus the container engine (what is left). `check` is pure: it
says which promises failed, so a test can feed it a dropped or duplicated event.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Events the controller itself records among a sandbox's (e.g. cost alerts): not sent by it.
CONTROLLER_EVENT_PREFIX = "simple:"
TERMINAL = {"succeeded", "failed", "timeout", "oom", "cancelled", "lost", "skipped"}


@dataclass(frozen=True)
class Evidence:
    """What one case left behind."""

    # (sandbox id, attempt) -> {event id: acknowledged?}, from the sandbox's outbox
    outboxes: Mapping[tuple[str, int], Mapping[str, bool]]
    # (sandbox id, event id) of every row in the controller's events table, repeats kept
    stored: Iterable[tuple[str, str]]
    # template id -> final status of each of its sandboxes
    terminal: Mapping[str, list[str]]
    templates: Iterable[str]
    containers_left: Iterable[str] = ()
    # sandboxes whose attempts uploaded no outbox (e.g. killed before any snapshot)
    without_outbox: Iterable[str] = ()


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)
    acknowledged: int = 0
    stored: int = 0
    sent: int = 0

    @property
    def held(self) -> bool:
        return not self.problems


def check(evidence: Evidence, *, all_delivered: bool = True) -> Verdict:
    """Every acknowledged event stored exactly once; every stored event was sent (by a
    sandbox whose outbox we have); with `all_delivered`, every sent event stored; one
    terminal result per template; no container left."""
    verdict = Verdict()
    stored = Counter(evidence.stored)
    verdict.stored = sum(stored.values())
    sent: dict[tuple[str, str], bool] = {}
    for (sandbox_id, _attempt), rows in evidence.outboxes.items():
        for event_id, acked in rows.items():
            sent[(sandbox_id, event_id)] = acked or sent.get((sandbox_id, event_id), False)
    verdict.sent = len(sent)
    verdict.acknowledged = sum(sent.values())
    repeated = sorted(key for key, n in stored.items() if n > 1)
    if repeated:
        verdict.problems.append(
            f"{len(repeated)} event(s) stored more than once, e.g. {repeated[0]}"
        )
    lost = sorted(key for key, acked in sent.items() if acked and key not in stored)
    if lost:
        verdict.problems.append(f"{len(lost)} acknowledged event(s) not stored, e.g. {lost[0]}")
    if all_delivered:
        undelivered = sorted(key for key in sent if key not in stored)
        if undelivered:
            verdict.problems.append(
                f"{len(undelivered)} sent event(s) never stored, e.g. {undelivered[0]}"
            )
    unknown_ok = set(evidence.without_outbox)
    invented = sorted(key for key in stored if key not in sent and key[0] not in unknown_ok)
    if invented:
        verdict.problems.append(
            f"{len(invented)} stored event(s) no sandbox sent, e.g. {invented[0]}"
        )
    for template_id in evidence.templates:
        states = evidence.terminal.get(template_id, [])
        if len(states) != 1 or states[0] not in TERMINAL:
            verdict.problems.append(f"template {template_id}: terminal results {states}, not one")
    left = sorted(evidence.containers_left)
    if left:
        verdict.problems.append(f"{len(left)} container(s) left: {', '.join(left[:3])}")
    return verdict


def outbox_rows(snapshot: bytes) -> dict[str, bool]:
    """{event id: acknowledged} from a snapshot's `outbox` table (read-only, private copy)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "snapshot.sqlite"
        path.write_bytes(snapshot)
        conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        try:
            rows = conn.execute("SELECT id, delivered FROM outbox").fetchall()
        finally:
            conn.close()
    return {str(event_id): int(delivered) == 1 for event_id, delivered in rows}


def gather(
    engine: Any, store: Any, run_id: str
) -> tuple[
    dict[tuple[str, int], dict[str, bool]], list[tuple[str, str]], dict[str, list[str]], list[str]
]:
    """The outboxes (from the store), stored events, terminal states and the sandboxes
    with no outbox, of one run, read from the controller's database and object store."""
    from sqlalchemy import select

    from controller.db.schema import attempts, events, sandboxes
    from controller.store.base import snapshot_key

    with engine.connect() as conn:
        rows = conn.execute(
            select(sandboxes.c.id, sandboxes.c.template_id, sandboxes.c.status).where(
                sandboxes.c.run_id == run_id
            )
        ).all()
        tried = conn.execute(
            select(attempts.c.sandbox_id, attempts.c.attempt).where(
                attempts.c.sandbox_id.in_([r.id for r in rows])
            )
        ).all()
        stored = [
            (r.sandbox_id, r.event_id)
            for r in conn.execute(
                select(events.c.sandbox_id, events.c.event_id).where(events.c.run_id == run_id)
            )
            if not r.event_id.startswith(CONTROLLER_EVENT_PREFIX)
        ]
    terminal: dict[str, list[str]] = {}
    for row in rows:
        terminal.setdefault(row.template_id, []).append(row.status)
    outboxes: dict[tuple[str, int], dict[str, bool]] = {}
    for sandbox_id, attempt in tried:
        data = store.get(snapshot_key(run_id, sandbox_id, attempt))
        if data is not None:
            outboxes[(sandbox_id, attempt)] = outbox_rows(data)
    with_outbox = {key[0] for key in outboxes}
    without = [r.id for r in rows if r.id not in with_outbox]
    return outboxes, stored, terminal, without
