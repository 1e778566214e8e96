"""What a sandbox's POST of events is, before anything is stored: its events, their body
hashes, the checks that need no database, and the answer a stored batch gets. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from controller.errors import ConflictError, SimpleError
from sandbox_image.contract import EventType


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


@dataclass
class EventRequest:
    """One POST of a batch: what it asks, and (once written) its answer or error."""

    sandbox_id: str
    authorization: str | None
    batch: Sequence[IncomingEvent]
    hashes: dict[str, str] = field(init=False)
    answer: dict[str, Any] | None = None
    error: SimpleError | None = None
    stored_count: int = 0  # events of this batch that were new (not replays)

    def __post_init__(self) -> None:
        self.hashes = {e.id: e.body_hash() for e in self.batch}


def accepted(batch: Sequence[IncomingEvent]) -> dict[str, Any]:
    """The answer to a stored batch; it depends only on the batch."""
    return {"stored": [e.id for e in batch], "count": len(batch)}


def check_batch_ids(request: EventRequest) -> None:
    """409 if the batch repeats an id with another body (an identical repeat is one event)."""
    for event in request.batch:
        if event.body_hash() != request.hashes[event.id]:
            raise ConflictError(
                f"the batch repeats event id {event.id} with different bodies",
                hint="give every event its own id; repeat one only as an exact replay",
            )
