"""Runs: create, list, read, cancel, report."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import PlainTextResponse
from pydantic import StringConstraints

from controller.api.deps import Authorized, ControllerDep
from controller.api.rendered import run_response
from controller.api.requests import LABEL_KEY_PATTERN, MAX_LABELS, RunCreate
from controller.api.responses import (
    ItemPage,
    Report,
    RunId,
    RunList,
    RunPublic,
    SandboxIdQuery,
    error_responses,
)
from controller.results.item_results import MAX_PAGE, all_items, list_items
from controller.results.report import REPORT_PAGE_MAX, fetch_report
from controller.results.report_formats import report_junit, report_markdown
from controller.runs import (
    SANDBOX_PAGE_DEFAULT,
    SANDBOX_PAGE_MAX,
    cancel_run,
    create_run,
    get_run,
    get_run_row,
    list_runs,
)
from controller.states import RunStatus

_PAGE_HELP = (
    f"sandboxes per page, in launch order (default {SANDBOX_PAGE_DEFAULT}, at most "
    f"{SANDBOX_PAGE_MAX}); sandboxes_total and sandbox_counts cover the whole run"
)

router = APIRouter(
    prefix="/v1/runs",
    tags=["runs"],
    dependencies=[Authorized],
    responses=error_responses(401, 422),
)


@router.post(
    "",
    status_code=201,
    response_model=RunPublic,
    response_description="The run, created",
    responses={
        200: {
            "model": RunPublic,
            "description": "The run created earlier with this Idempotency-Key and body",
        },
        **error_responses(400, 409),
    },
)
def start_run(
    body: RunCreate,
    controller: ControllerDep,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(
            max_length=200,
            description="The same key and body return the same run (200); the same key "
            "with another body is 409. Use your CI job's id so a retried step starts no "
            "second run.",
        ),
    ] = None,
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
        store=controller.store,
    )
    if created:
        controller.kick()
    else:
        response.status_code = 200
    return get_run(controller.engine, run_id)


# `key=value`, the key as a label's (controller.api.requests.LABEL_KEY_PATTERN)
LabelFilter = Annotated[
    str, StringConstraints(pattern=LABEL_KEY_PATTERN.removesuffix("$") + r"=[\s\S]*$")
]


@router.get("", response_model=RunList)
def runs_list(
    controller: ControllerDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    status: RunStatus | None = None,
    label: Annotated[
        list[LabelFilter] | None,
        Query(
            max_length=MAX_LABELS,
            description="key=value: only runs with this label (repeat: every one must match)",
        ),
    ] = None,
) -> dict[str, Any]:
    """Recent runs, newest first; `label=key=value` keeps the runs carrying it."""
    return {"runs": list_runs(controller.engine, limit, status, label_filter(label or []))}


def label_filter(pairs: list[str]) -> dict[str, str]:
    """`key=value` strings (checked by LabelFilter) as a dict."""
    return dict(pair.partition("=")[::2] for pair in pairs)


@router.get("/{run_id}", response_model=RunPublic, responses=error_responses(404))
def run_get(
    run_id: RunId,
    controller: ControllerDep,
    limit: Annotated[int, Query(ge=1, le=SANDBOX_PAGE_MAX, description=_PAGE_HELP)] = (
        SANDBOX_PAGE_DEFAULT
    ),
    offset: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    """One run with its sandboxes (a page: limit, offset) and their progress."""
    return run_response(controller.engine, get_run(controller.engine, run_id, limit, offset))


@router.post("/{run_id}/cancel", response_model=RunPublic, responses=error_responses(404))
def run_cancel(run_id: RunId, controller: ControllerDep) -> dict[str, Any]:
    """Stop every sandbox of the run."""
    result = cancel_run(controller.engine, run_id)
    controller.kick()
    return result


@router.get(
    "/{run_id}/report",
    response_model=Report,
    responses={
        200: {
            "content": {
                "application/xml": {"schema": {"type": "string"}},
                "text/markdown": {"schema": {"type": "string"}},
            },
            "description": "JSON by default; JUnit XML (one testcase per sandbox, or per "
            "item of a batch sandbox) with "
            "?format=junit; a Markdown summary with ?format=markdown",
        },
        **error_responses(404),
    },
)
def run_report(
    run_id: RunId,
    controller: ControllerDep,
    format: Annotated[str, Query(pattern="^(json|junit|markdown)$")] = "json",
    limit: Annotated[int | None, Query(ge=1, le=REPORT_PAGE_MAX, description=_PAGE_HELP)] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> Any:
    """The aggregated report: JSON, or ?format=junit / ?format=markdown."""
    report = fetch_report(controller.engine, run_id, limit, offset)
    if format == "junit":
        items = all_items(controller.engine, run_id)
        return PlainTextResponse(report_junit(report, items), media_type="application/xml")
    if format == "markdown":
        problems = [
            *list_items(controller.engine, run_id, limit=50, outcome_filter="errored"),
            *list_items(controller.engine, run_id, limit=50, outcome_filter="failed"),
        ]
        return PlainTextResponse(report_markdown(report, problems), media_type="text/markdown")
    return report


@router.get("/{run_id}/items", response_model=ItemPage, responses=error_responses(404))
def run_items(
    run_id: RunId,
    controller: ControllerDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    after: Annotated[
        str | None,
        Query(
            max_length=300,
            pattern=r"^[a-z0-9-]{1,63}/[A-Za-z0-9_.:/@+=-]{1,200}$",
            description="The previous page's next_after cursor",
        ),
    ] = None,
    sandbox_id: SandboxIdQuery = None,
    outcome: Annotated[str | None, Query(pattern="^(passed|failed|errored|skipped)$")] = None,
) -> dict[str, Any]:
    """The run's per-item results (batch templates), a page at a time."""
    get_run_row(controller.engine, run_id)
    cursor = None
    if after is not None:
        sandbox, _, item = after.partition("/")  # the pattern guarantees the "/"
        cursor = (sandbox, item)
    page = list_items(
        controller.engine,
        run_id,
        limit=limit,
        after=cursor,
        sandbox_id=sandbox_id,
        outcome_filter=outcome,
    )
    last = page[-1] if len(page) == limit else None
    return {
        "items": page,
        "next_after": f"{last['sandbox_id']}/{last['item_id']}" if last else None,
    }
