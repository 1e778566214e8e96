"""Runs: create, list, read, cancel, report."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import PlainTextResponse

from controller.api.deps import Authorized, ControllerDep
from controller.api.models import ErrorResponse, RunCreate
from controller.report import fetch_report
from controller.report_formats import report_junit, report_markdown
from controller.runs import cancel_run, create_run, get_run, list_runs

router = APIRouter(
    prefix="/v1/runs",
    tags=["runs"],
    dependencies=[Authorized],
    responses={
        401: {"model": ErrorResponse},
        404: {"model": ErrorResponse},
        422: {"model": ErrorResponse},
    },
)


@router.post(
    "",
    status_code=201,
    responses={200: {"description": "Idempotent replay"}, 409: {"model": ErrorResponse}},
)
def start_run(
    body: RunCreate,
    controller: ControllerDep,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> dict[str, Any]:
    """Plan and start a run; the same Idempotency-Key and body return the same run."""
    run_id, created = create_run(
        controller.engine,
        controller.catalog,
        body.plan_request(),
        body.model_dump(mode="json"),
        backend=controller.backend.name,
        default_image=controller.settings.default_image,
        seed=body.seed,
        idempotency_key=idempotency_key,
    )
    if created:
        controller.kick()
    else:
        response.status_code = 200
    return get_run(controller.engine, run_id)


@router.get("")
def runs_list(
    controller: ControllerDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    status: str | None = None,
) -> dict[str, Any]:
    """Recent runs, newest first."""
    return {"runs": list_runs(controller.engine, limit, status)}


@router.get("/{run_id}")
def run_get(run_id: str, controller: ControllerDep) -> dict[str, Any]:
    """One run with its sandboxes and their progress."""
    return get_run(controller.engine, run_id)


@router.post("/{run_id}/cancel")
def run_cancel(run_id: str, controller: ControllerDep) -> dict[str, Any]:
    """Stop every sandbox of the run."""
    result = cancel_run(controller.engine, run_id)
    controller.kick()
    return result


@router.get(
    "/{run_id}/report", responses={200: {"content": {"application/xml": {}, "text/markdown": {}}}}
)
def run_report(
    run_id: str,
    controller: ControllerDep,
    format: Annotated[str, Query(pattern="^(json|junit|markdown)$")] = "json",
) -> Any:
    """The aggregated report: JSON, or ?format=junit / ?format=markdown."""
    report = fetch_report(controller.engine, run_id)
    if format == "junit":
        return PlainTextResponse(report_junit(report), media_type="application/xml")
    if format == "markdown":
        return PlainTextResponse(report_markdown(report), media_type="text/markdown")
    return report
