"""The dashboard's pages: runs, a run (and its report fragment), a sandbox, plan-and-start;
and the runs list's live stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, StreamingResponse

from controller.api.deps import ControllerDep
from controller.api.responses import RunId, SandboxId
from controller.api.web import queries, views
from controller.api.web.access import AssetViewer, PageViewer
from controller.api.web.render import page
from controller.api.web.security import SECURITY_HEADERS
from controller.results.report import fetch_report
from controller.runs import get_run, get_sandbox
from controller.states import ACTIVE_RUN, RunStatus

router = APIRouter(include_in_schema=False)

RUN_STATUSES = [s.value for s in RunStatus]
LIVE_RUNS_POLL_S = 1.0
LIVE_RUNS_KEEPALIVE_S = 15.0


@router.get("/", response_class=HTMLResponse)
def runs_list(
    controller: ControllerDep,
    viewer: PageViewer,
    status: Annotated[RunStatus | None, Query()] = None,
    page_no: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1,
) -> HTMLResponse:
    """Recent runs, newest first, filterable by status, a page at a time."""
    rows, more = queries.runs_page(controller.engine, page_no, status)
    return page(
        "runs.html",
        viewer=viewer,
        runs=rows,
        status=status.value if status else "",
        statuses=RUN_STATUSES,
        page_no=page_no,
        more=more,
        active=[s.value for s in ACTIVE_RUN],
        leader=controller.leader(),
    )


@router.get("/live/runs")
async def runs_live(
    controller: ControllerDep,
    _viewer: AssetViewer,
    status: Annotated[RunStatus | None, Query()] = None,
    page_no: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1,
) -> StreamingResponse:
    """Server-sent `runs` messages: the page's rows whenever they change."""
    return StreamingResponse(
        _runs_messages(controller.engine, page_no, status),
        media_type="text/event-stream",
        headers={**SECURITY_HEADERS, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _runs_messages(engine: Any, page_no: int, status: str | None) -> AsyncIterator[bytes]:
    yield b"retry: 2000\n\n"
    sent, idle = "", 0.0
    while True:
        rows, more = await asyncio.to_thread(queries.runs_page, engine, page_no, status)
        state = json.dumps({"runs": rows, "more": more}, sort_keys=True)
        if state != sent:
            sent, idle = state, 0.0
            yield f"event: runs\ndata: {state}\n\n".encode()
        elif idle >= LIVE_RUNS_KEEPALIVE_S:
            idle = 0.0
            yield b": keep-alive\n\n"
        await asyncio.sleep(LIVE_RUNS_POLL_S)
        idle += LIVE_RUNS_POLL_S


@router.get("/new", response_class=HTMLResponse)
def new_run(controller: ControllerDep, viewer: PageViewer) -> HTMLResponse:
    """Pick suites or templates or say it in words; see the plan; then start it."""
    catalog = controller.catalog
    templates = sorted(catalog.templates.values(), key=lambda t: (t.category, t.id))
    suites = sorted(catalog.suites.items())
    return page("new.html", viewer=viewer, templates=templates, suites=suites)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: RunId, controller: ControllerDep, viewer: PageViewer) -> HTMLResponse:
    """One run: header, sandboxes, timeline, events; its report once it has ended."""
    engine = controller.engine
    after = queries.last_event_id(engine, run_id)  # before the run: the stream resends the rest
    run = get_run(engine, run_id)
    now = datetime.now(UTC)
    last = queries.last_event_per_sandbox(engine, run_id)
    totals = views.run_totals(run)
    ended = run["status"] not in ACTIVE_RUN
    return page(
        "run.html",
        viewer=viewer,
        run=run,
        totals=totals,
        cost=views.cost_scale(totals["cost_usd"], totals["estimate_usd"][1], run["budget_usd"]),
        rows=views.sandbox_rows(run, last, now),
        timeline=views.timeline(run, queries.run_attempts(engine, run_id), now),
        row_height=views.row_height(len(run["sandboxes"])),
        events=queries.latest_events(engine, run_id),
        after=after,
        ended=ended,
        report=_report_context(engine, run_id) if ended else None,
        run_duration=_run_duration(run, now),
    )


@router.get("/runs/{run_id}/report-fragment", response_class=HTMLResponse)
def run_report_fragment(
    run_id: RunId, controller: ControllerDep, _viewer: AssetViewer
) -> HTMLResponse:
    """The report section alone, for a run page that watched the run end."""
    return page("_report.html", run_id=run_id, report=_report_context(controller.engine, run_id))


@router.get("/sandboxes/{sandbox_id}", response_class=HTMLResponse)
def sandbox_page(
    sandbox_id: SandboxId, controller: ControllerDep, viewer: PageViewer
) -> HTMLResponse:
    """One sandbox: attempts with outcome and reason, events, logs (live or archived)."""
    sandbox = get_sandbox(controller.engine, sandbox_id)
    run_id = sandbox["run_id"]
    template = controller.catalog.templates.get(sandbox["template_id"])
    return page(
        "sandbox.html",
        viewer=viewer,
        sandbox=sandbox,
        description=template.description if template else "",
        events=queries.latest_events(controller.engine, run_id, sandbox_id),
        after=queries.last_event_id(controller.engine, run_id),
        duration=views.sandbox_duration(sandbox, datetime.now(UTC)),
    )


def _report_context(engine: Any, run_id: str) -> dict[str, Any]:
    report = fetch_report(engine, run_id)
    totals = report["totals"]
    return {
        **report,
        "coverage": views.coverage(report["by_mechanism"], totals["mechanisms_covered"]),
    }


def _run_duration(run: dict[str, Any], now: datetime) -> float | None:
    start = views.parse_time(run["started_at"] or run["created_at"])
    end = views.parse_time(run["finished_at"]) or now
    return (end - start).total_seconds() if start else None
