"""Conversations kept in the database (table `conversations`), so that API replicas behind
a load balancer carry one conversation on whichever gets the next turn.

Each `open` reads the conversation's state afresh (another replica may have answered the
last turn) and each turn ends with `save`. The state is plain JSON: the history, the
runs followed and notices seen, the choices offered and what waits for a yes (a planned
request, or a run to cancel). Bounded like the memory store: idle ones are treated as
gone and removed, and past `limit` the oldest go first.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, delete, func, insert, select, update

from controller.catalog.batches import WorkItem
from controller.catalog.stages import Policy, PolicyKind, Stage
from controller.db.schema import conversations
from controller.errors import NotFoundError
from controller.language.choices import Choice
from controller.planning.model import PlanRequest, Priority
from controller.principal.conversation import Conversation, Conversations, Pending

TUPLES = ("names", "suites", "templates", "categories", "exclude")


def encode_request(request: PlanRequest | None) -> dict[str, Any] | None:
    if request is None:
        return None
    data: dict[str, Any] = {name: list(getattr(request, name)) for name in TUPLES}
    data.update(query=request.query, budget_usd=request.budget_usd,
                priority=request.priority.value if request.priority else None,
                max_parallel=request.max_parallel, batch_size=request.batch_size,
                max_runtime_s=request.max_runtime_s,
                items=None if request.items is None else [
                    {"item_id": i.item_id, "data": i.data} for i in request.items],
                stages=[{"templates": list(s.templates), "kind": s.policy.kind.value,
                         "quorum": s.policy.quorum} for s in request.stages])
    return data


def decode_request(data: dict[str, Any] | None) -> PlanRequest | None:
    if data is None:
        return None
    items = data.get("items")
    return PlanRequest(
        **{name: tuple(data.get(name) or ()) for name in TUPLES},
        query=data.get("query"), budget_usd=data.get("budget_usd"),
        priority=Priority(data["priority"]) if data.get("priority") else None,
        max_parallel=data.get("max_parallel"), batch_size=data.get("batch_size"),
        max_runtime_s=data.get("max_runtime_s"),
        items=None if items is None else tuple(WorkItem(i["item_id"], i["data"]) for i in items),
        stages=tuple(Stage(tuple(s["templates"]), Policy(PolicyKind(s["kind"]), s["quorum"]))
                     for s in data.get("stages") or ()),
    )


def encode(conversation: Conversation) -> dict[str, Any]:
    pending = conversation.pending
    return {
        "history": conversation.history,
        "pending": None if pending is None else {
            "kind": pending.kind, "request": encode_request(pending.request),
            "run_id": pending.run_id, "text": pending.text},
        "choices": {k: {**asdict(c), "suites": list(c.suites), "templates": list(c.templates),
                        "estimated_cost_usd": list(c.estimated_cost_usd)}
                    for k, c in conversation.choices.items()},
        "carried": encode_request(conversation.carried),
        "carried_start": conversation.carried_start,
        "runs": conversation.runs,
        "seen": sorted(conversation.seen),
    }


def decode(conversation_id: str, owner: str, state: dict[str, Any]) -> Conversation:
    pending = state.get("pending")
    return Conversation(
        conversation_id, owner, time.monotonic(),
        history=list(state.get("history") or []),
        pending=None if pending is None else Pending(
            pending["kind"], decode_request(pending.get("request")), pending.get("run_id"),
            pending.get("text", "")),
        choices={k: Choice(c["key"], c["label"], tuple(c["suites"]), tuple(c["templates"]),
                           int(c["count"]), (float(c["estimated_cost_usd"][0]),
                                             float(c["estimated_cost_usd"][1])))
                 for k, c in (state.get("choices") or {}).items()},
        carried=decode_request(state.get("carried")),
        carried_start=bool(state.get("carried_start")),
        runs=list(state.get("runs") or []),
        seen=set(state.get("seen") or []),
    )


class StoredConversations(Conversations):
    """Conversations in the database; a lock per conversation within this replica."""

    def __init__(self, engine: Engine, limit: int, idle_s: float) -> None:
        super().__init__(limit, idle_s)
        self.engine = engine
        self._locks: dict[str, threading.Lock] = {}

    def _lock_of(self, conversation_id: str) -> threading.Lock:
        with self._lock:
            if len(self._locks) > 4 * self.limit:
                self._locks.clear()
            return self._locks.setdefault(conversation_id, threading.Lock())

    def open(self, conversation_id: str | None, owner: str) -> Conversation:
        now = datetime.now(UTC)
        idle = now - timedelta(seconds=self.idle_s)
        with self.engine.begin() as conn:
            conn.execute(delete(conversations).where(conversations.c.updated_at < idle))
            if conversation_id is None:
                self._make_room(conn)
                made = Conversation("conv-" + secrets.token_hex(12), owner, time.monotonic())
                conn.execute(insert(conversations).values(
                    id=made.id, owner=owner, state=encode(made), updated_at=now))
                made.lock = self._lock_of(made.id)
                return made
            row = conn.execute(select(conversations).where(
                conversations.c.id == conversation_id)).first()
        if row is None or not secrets.compare_digest(row.owner, owner):
            raise NotFoundError(
                f"unknown conversation {conversation_id}",
                hint="leave conversation_id out to start a new conversation (they end "
                "after an idle hour, and belong to the token that opened them)",
            )
        found = decode(row.id, row.owner, row.state)
        found.lock = self._lock_of(row.id)
        return found

    def _make_room(self, conn: Any) -> None:
        count = conn.execute(select(func.count()).select_from(conversations)).scalar() or 0
        if count >= self.limit:
            oldest = select(conversations.c.id).order_by(conversations.c.updated_at).limit(
                count - self.limit + 1).scalar_subquery()
            conn.execute(delete(conversations).where(conversations.c.id.in_(oldest)))

    def save(self, conversation: Conversation) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(conversations).where(conversations.c.id == conversation.id)
                         .values(state=encode(conversation), updated_at=datetime.now(UTC)))

    def __len__(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(conversations)).scalar()
                       or 0)
