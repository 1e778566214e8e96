"""Event ingestion: the controller's side of the sandbox event protocol.

Each `(sandbox, event id)` is stored exactly once; a replay gets the same answer;
the same id with another body is a conflict and stores nothing of its batch.
The batch is committed before the answer is sent. Progress shows on the
sandbox row in the same transaction.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, select, update
from sqlalchemy.dialects import postgresql, sqlite

from controller.db.schema import events, sandboxes
from controller.errors import ConflictError, ForbiddenError, NotFoundError, UnauthorizedError
from controller.states import SandboxStatus
from controller.tokens import hash_token, token_matches
from sandbox_image.contract import EventType

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IncomingEvent:
    id: str
    seq: int
    type: EventType
    time: datetime
    data: dict[str, Any]

    def body_hash(self) -> str:
        canonical = json.dumps(
            {
                "id": self.id,
                "seq": self.seq,
                "type": self.type.value,
                "time": self.time.isoformat(),
                "data": self.data,
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()


def authorize_sandbox(conn: Connection, sandbox_id: str, authorization: str | None) -> Any:
    """The sandbox row if the bearer token is this sandbox's; 401 or 403 otherwise."""
    token = _bearer(authorization)
    row = conn.execute(select(sandboxes).where(sandboxes.c.id == sandbox_id)).first()
    if row is not None and token_matches(token, row.token_hash):
        if row.status != SandboxStatus.RUNNING:
            raise UnauthorizedError(
                f"the token of sandbox {sandbox_id} stopped working: the sandbox has ended "
                f"({row.status})",
                hint="a sandbox may only report while it runs",
            )
        return row
    other = conn.execute(
        select(sandboxes.c.id).where(sandboxes.c.token_hash == hash_token(token))
    ).first()
    if other is not None:
        raise ForbiddenError(
            f"this token belongs to another sandbox, not {sandbox_id}",
            hint="post to /v1/sandboxes/{SIMPLE_SANDBOX_ID}/events with your own id",
        )
    if row is None:
        raise UnauthorizedError(
            f"unknown sandbox {sandbox_id} or invalid token",
            hint="use SIMPLE_SANDBOX_ID and SIMPLE_SANDBOX_TOKEN as given",
        )
    raise UnauthorizedError(
        f"invalid token for sandbox {sandbox_id}",
        hint="send `Authorization: Bearer $SIMPLE_SANDBOX_TOKEN`",
    )


def _bearer(authorization: str | None) -> str:
    if not authorization:
        raise UnauthorizedError(
            "missing Authorization header",
            hint="send `Authorization: Bearer $SIMPLE_SANDBOX_TOKEN`",
        )
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthorizedError(
            "Authorization header is not `Bearer <token>`",
            hint="send `Authorization: Bearer $SIMPLE_SANDBOX_TOKEN`",
        )
    return token.strip()


def ingest_events(
    engine: Engine, sandbox_id: str, authorization: str | None, batch: Sequence[IncomingEvent]
) -> dict[str, Any]:
    """Authorize, dedupe and store a batch; the answer depends only on the batch."""
    with engine.begin() as conn:
        row = authorize_sandbox(conn, sandbox_id, authorization)
        hashes = {e.id: e.body_hash() for e in batch}
        if len(hashes) != len(batch):
            raise ConflictError(
                "the batch repeats an event id with different bodies",
                hint="give every event its own id",
            )
        known = dict(
            conn.execute(
                select(events.c.event_id, events.c.body_hash).where(
                    events.c.sandbox_id == sandbox_id, events.c.event_id.in_(list(hashes))
                )
            ).all()
        )
        changed = [i for i, h in known.items() if hashes[i] != h]
        if changed:
            raise ConflictError(
                f"event {changed[0]} was already received with a different body",
                hint="an event id is sent again only as an exact replay; use a new id",
            )
        fresh = [e for e in batch if e.id not in known]
        if fresh:
            _insert(conn, row, fresh, hashes)
            _apply_progress(conn, row, fresh)
    return {"stored": [e.id for e in batch], "count": len(batch)}


def _insert(conn: Connection, row: Any, fresh: list[IncomingEvent], hashes: dict[str, str]) -> None:
    now = datetime.now(UTC)
    values = [
        {
            "sandbox_id": row.id,
            "run_id": row.run_id,
            "event_id": e.id,
            "attempt": row.attempt,
            "seq": e.seq,
            "type": e.type.value,
            "time": e.time,
            "data": e.data,
            "body_hash": hashes[e.id],
            "received_at": now,
        }
        for e in fresh
    ]
    dialect = conn.dialect.name
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(events)
    conn.execute(insert.on_conflict_do_nothing(index_elements=["sandbox_id", "event_id"]), values)


def _apply_progress(conn: Connection, row: Any, fresh: list[IncomingEvent]) -> None:
    changes: dict[str, Any] = {"last_seq": max([row.last_seq, *(e.seq for e in fresh)])}
    for event in sorted(fresh, key=lambda e: e.seq):
        data = event.data
        if event.type is EventType.STARTED and row.started_at is None:
            changes["started_at"] = event.time
        if "step" in data and isinstance(data["step"], int):
            changes["step"] = data["step"]
        if "steps_total" in data and isinstance(data["steps_total"], int):
            changes["steps_total"] = data["steps_total"]
        if isinstance(data.get("cost_usd"), int | float):
            changes["cost_usd"] = float(data["cost_usd"])
        if isinstance(data.get("tokens"), int):
            changes["tokens"] = data["tokens"]
        if event.type is EventType.FAILED:
            error = data.get("error") or {}
            changes["error"] = f"{error.get('type')}: {error.get('message')}"
            changes["transient"] = bool(error.get("transient"))
    conn.execute(
        update(sandboxes)
        .where(sandboxes.c.id == row.id, sandboxes.c.attempt == row.attempt)
        .values(**changes)
    )


def load_sandbox(engine: Engine, sandbox_id: str) -> Any:
    with engine.connect() as conn:
        row = conn.execute(select(sandboxes).where(sandboxes.c.id == sandbox_id)).first()
    if row is None:
        raise NotFoundError(f"unknown sandbox {sandbox_id}", hint="see `simplectl status RUN`")
    return row
