"""What a run is accountable for: its ledger and its verification, cost-alert
confirmations and estimate accuracy."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import Field

from controller.api.deps import Authorized, ControllerDep
from controller.api.responses import Public, RunId, error_responses
from controller.reconcile.alerts import confirm_run
from controller.results.estimates import accuracy
from controller.results.ledger import read_ledger
from controller.results.verify import verify_run

router = APIRouter(tags=["accounting"], responses=error_responses(422))


class LedgerEntry(Public):
    seq: int = Field(description="1, 2, … in the order attempts ended")
    sandbox_id: str
    attempt: int
    prev_hash: str = Field(description="The previous entry's hash (64 zeros for the first)")
    entry_hash: str = Field(description='SHA-256 of canonical JSON {"seq", "prev", "record"}')
    record: dict[str, Any]
    created_at: str


class Ledger(Public):
    run_id: str
    entries: list[LedgerEntry]
    count: int
    ledger_head: str | None = Field(description="The last entry's hash")


class Verification(Public):
    run_id: str
    ok: bool
    entries: int
    snapshots: int = Field(description="Snapshot objects fetched and re-hashed")
    ledger_head: str | None
    problem: str | None = Field(description="The first entry that does not match, and why")
    summary: str


class Confirmed(Public):
    run_id: str
    confirmed: str = Field(description="What the run was waiting for")


class Accuracy(Public):
    templates: list[dict[str, Any]]


@router.get(
    "/v1/runs/{run_id}/ledger",
    dependencies=[Authorized],
    response_model=Ledger,
    responses=error_responses(401, 404),
)
def run_ledger(run_id: RunId, controller: ControllerDep) -> dict[str, Any]:
    """The run's hash chain: one entry per ended attempt, oldest first."""
    return read_ledger(controller.engine, run_id)


@router.get(
    "/v1/runs/{run_id}/verify",
    dependencies=[Authorized],
    response_model=Verification,
    responses=error_responses(401, 404),
)
def run_verify(run_id: RunId, controller: ControllerDep) -> dict[str, Any]:
    """Recompute the chain from the database and re-hash every snapshot in the store."""
    verdict = verify_run(
        controller.engine, controller.store, run_id, controller.settings.snapshot_max_bytes
    )
    return {
        "run_id": run_id,
        "ok": verdict.ok,
        "entries": verdict.entries,
        "snapshots": verdict.snapshots,
        "ledger_head": verdict.head,
        "problem": verdict.problem,
        "summary": verdict.summary(),
    }


@router.post(
    "/v1/runs/{run_id}/confirm",
    dependencies=[Authorized],
    response_model=Confirmed,
    responses=error_responses(401, 404, 409),
)
def run_confirm(run_id: RunId, controller: ControllerDep) -> dict[str, Any]:
    """Let a run held by a cost alert (confirm_over) launch again."""
    result = confirm_run(controller.engine, run_id)
    controller.kick()
    return result


@router.get(
    "/v1/estimates",
    dependencies=[Authorized],
    response_model=Accuracy,
    responses=error_responses(401),
)
def estimate_accuracy(controller: ControllerDep) -> dict[str, Any]:
    """Per template: the catalog's estimate against what its runs really cost and took."""
    return {"templates": accuracy(controller.engine, controller.catalog)}
