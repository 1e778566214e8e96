"""The way in for one controller's event batches: the attempt's quota, then the writer.

The events route hands each parsed batch to its controller's `EventIntake`, which
counts it against the attempt's caps (`EventQuota`: 429 or 413 naming the cap), queues
it for the group-commit writer (`EventWriter`) and answers once it is committed; a
batch refused after its reservation gives the reservation back.
"""

from __future__ import annotations

import asyncio
from typing import Any

from controller import metrics
from controller.errors import PayloadTooLargeError, QuotaExceededError, SimpleError
from controller.intake.event_batch import EventRequest
from controller.intake.event_quota import EventQuota
from controller.intake.event_writer import EventWriter


class EventIntake:
    """Bounds and stores the event batches of one controller's sandboxes."""

    def __init__(self, writer: EventWriter, quota: EventQuota) -> None:
        self.writer, self.quota = writer, quota

    async def accept(
        self, request: EventRequest, attempt: int | None, size: int
    ) -> dict[str, Any]:
        """Store the batch (`size` bytes) and answer after the commit, or raise its error.

        `attempt` is the attempt whose token the request carries, as the body guard found
        it; None when it found none (the writer then answers 401 or 403), and nothing is
        counted against a quota.
        """
        cost = None
        try:
            if attempt is not None:
                cost = (request.sandbox_id, attempt, len(request.batch), size)
                await asyncio.to_thread(self.quota.reserve, *cost)
            return await asyncio.wrap_future(self.writer.submit(request))
        except SimpleError as e:
            metrics.EVENTS_REJECTED.labels(str(e.status_code)).inc()
            if cost is not None and not isinstance(e, QuotaExceededError | PayloadTooLargeError):
                self.quota.release(*cost)
            raise
