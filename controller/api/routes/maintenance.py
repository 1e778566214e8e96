"""Maintenance: retention's gc (`POST /v1/gc`, `simplectl gc`). An admin's call: with
SIMPLE_API_TOKENS set, every token listed there is an admin."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import Field

from controller.api.deps import Authorized, ControllerDep
from controller.api.responses import Public, error_responses
from controller.results.retention import collect_garbage

router = APIRouter(tags=["maintenance"], responses=error_responses(401, 422))

# Runs one request purges at most: a huge backlog is worked off in several calls (the
# answer says `complete: false`) or by the reconciler's daily gc, never in one long request.
GC_RUNS_PER_REQUEST = 1000


class Freed(Public):
    objects: int
    bytes: int


class GcReport(Public):
    dry_run: bool = Field(description="True: nothing was removed, this is what would be")
    retention_days: int = Field(description="SIMPLE_RETENTION_DAYS (0: retention is off)")
    cutoff: str | None = Field(description="Runs that ended before this time are purged")
    runs: int = Field(description="Runs purged (or that would be)")
    run_ids: list[str] = Field(description="The first 100 of them, oldest end first")
    objects: int = Field(description="Store objects removed")
    bytes: int = Field(description="Bytes of those store objects")
    event_rows: int = Field(description="Event rows deleted from the database")
    by_kind: dict[str, Freed] = Field(description="logs, items, resume, inputs")
    complete: bool = Field(description="False: the limit per call was reached; call again")
    kept: str = Field(description="What retention never removes")
    summary: str


@router.post(
    "/v1/gc",
    dependencies=[Authorized],
    response_model=GcReport,
    responses=error_responses(401, 503),
)
def gc(
    controller: ControllerDep,
    dry_run: Annotated[
        bool, Query(description="Say what would be freed, remove nothing")
    ] = False,
) -> dict[str, Any]:
    """Remove the logs, item files, resume copies, stage inputs and event rows of runs
    that ended more than SIMPLE_RETENTION_DAYS ago; reports and results stay."""
    result = collect_garbage(
        controller.engine,
        controller.store,
        now=controller.now(),
        retention_days=controller.settings.retention_days,
        dry_run=dry_run,
        max_runs=GC_RUNS_PER_REQUEST,
    )
    return {**result.to_dict(), "summary": result.summary()}
