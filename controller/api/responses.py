"""Response models of the HTTP API: the error body and what each route answers.

Each response model allows extra fields, so a field added on the server side shows up at
once; the fields listed here are the contract clients may rely on. Requests are in
`requests.py`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import BaseModel, ConfigDict, Field

from controller.planning.model import Priority
from controller.states import RunStatus, SandboxStatus


class ErrorDetail(BaseModel):
    code: str = Field(description="Machine-readable error code")
    message: str = Field(description="What was wrong")
    hint: str | None = Field(None, description="What to do")
    field: str | None = Field(None, description="The offending field, when there is one")


class ErrorResponse(BaseModel):
    error: ErrorDetail


class EventsAccepted(BaseModel):
    stored: list[str] = Field(description="Ids of the batch's events, all stored exactly once")
    count: int


class Leader(BaseModel):
    """Who leads the reconcilers, as this process knows it."""

    holder: str | None = Field(None, description="The lease's holder; null: nobody yet")
    epoch: int | None = Field(None, description="The lease's epoch (+1 at each new holder)")
    leading: bool = Field(description="Whether this process is the leader")
    role: str = Field(description="This process's role: all, api or reconciler")


class Health(BaseModel):
    status: str
    detail: str | None = None
    leader: Leader | None = None


ID_PATTERN = r"^[a-z0-9-]{1,63}$"
RunId = Annotated[str, Path(pattern=ID_PATTERN, description="A run id")]
SandboxId = Annotated[str, Path(pattern=ID_PATTERN, description="A sandbox id")]
"""Run and sandbox ids: lowercase `[a-z0-9-]`, at most 63 characters (a Kubernetes name)."""

Timestamp = Annotated[
    str | None, Field(json_schema_extra={"format": "date-time"}, description="ISO 8601, UTC")
]

ERROR_DESCRIPTIONS = {
    400: "The body could not be read (not UTF-8 or not JSON)",
    401: "No API token, or not one of SIMPLE_API_TOKENS (sandbox routes: not the sandbox's "
    "token, or the sandbox has ended)",
    403: "Another sandbox's token, or an attempt that is over",
    404: "No such run or sandbox",
    409: "A conflict: an Idempotency-Key or event id reused with another body",
    413: "The body is over its route's size limit, or the sandbox's event bytes cap",
    422: "The request does not fit the schema, or names what the catalog does not have; "
    "`error.field` names the offending field",
    429: "Busy: the event queue is full (nothing was stored; send again after Retry-After); "
    "or a cap is reached: the sandbox's events per attempt, log followers, or one "
    "upload and one download at a time per sandbox attempt (after Retry-After)",
    503: "A dependency (database, store, backend) is unavailable; retry later "
    "(events: after Retry-After)",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for FastAPI: each code with the ErrorResponse model."""
    return {
        code: {"model": ErrorResponse, "description": ERROR_DESCRIPTIONS[code]} for code in codes
    }


class Public(BaseModel):
    """An answer of the API: extra fields allowed, so what the server adds shows at once."""

    model_config = ConfigDict(extra="allow")


class Estimate(Public):
    cost_usd: list[float] = Field(min_length=2, max_length=2, description="[min, max] in USD")
    runtime_s: list[float] = Field(min_length=2, max_length=2, description="[min, max] seconds")


class Resources(Public):
    cpu: str
    memory: str


class TemplatePublic(Public):
    """One catalog entry."""

    id: str
    category: str
    description: str
    mechanisms: list[str]
    tags: list[str]
    estimate: Estimate
    timeout_s: int
    resources: Resources
    image: str | None
    command: list[str] | None
    config: dict[str, Any]
    items: int | None = Field(None, description="Batch template: how many items it carries")
    batch_size: int | None = Field(None, description="Batch template: items per sandbox at most")
    entrypoint: str | None = Field(None, description="module:function run on each item")


class TemplateList(Public):
    templates: list[TemplatePublic]
    count: int
    suites: dict[str, list[str]] = Field(description="Suite name to template ids")


class Exclusion(Public):
    template_id: str
    reason: str


class ReadPhrase(Public):
    text: str = Field(description="The words of the request")
    meaning: str = Field(description="What they became")


class ChoicePublic(Public):
    key: str = Field(description="A, B, C...")
    label: str
    suites: list[str]
    templates: list[str]
    count: int = Field(description="How many templates it selects")
    estimated_cost_usd: list[float] = Field(min_length=2, max_length=2)


class Interpretation(Public):
    """How a free-text request was read: every phrase, and what was not understood."""

    text: str
    phrases: list[ReadPhrase]
    not_understood: list[str] = Field(description="Words that were not read as anything")
    notes: list[str] = Field(description="Decisions worth knowing, e.g. conflicting values")
    choices: list[ChoicePublic] = Field(description="Set when the request was ambiguous")


class PlanPublic(Public):
    """What would run (in launch order), what not and why, and what it would cost."""

    selected: list[str]
    excluded: list[Exclusion]
    estimated_cost_usd: list[float] = Field(min_length=2, max_length=2)
    estimated_runtime_s: list[float] = Field(min_length=2, max_length=2)
    max_parallel: int
    max_parallel_expensive: int | None = None
    expensive: list[str] = Field(default_factory=list)
    priority: Priority
    budget_usd: float | None
    batches: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Batch templates: items, batch_size, sandboxes and items_per_sandbox",
    )
    max_runtime_s: float | None = Field(
        None, description="Runtime limit read from the query: longer templates are excluded"
    )
    interpretation: Interpretation | None = Field(
        None, description="How the free-text query was read (null without a query)"
    )


class SandboxPublic(Public):
    """One sandbox of a run, with its progress as its events report it."""

    sandbox_id: str
    run_id: str
    template_id: str
    status: SandboxStatus
    attempts: int
    exit_code: int | None
    error: str | None
    step: int | None
    steps_total: int | None
    cost_usd: float
    tokens: int
    last_seq: int
    launched_at: Timestamp
    started_at: Timestamp
    finished_at: Timestamp
    aggregated: bool


class AttemptPublic(Public):
    sandbox_id: str
    attempt: int
    status: str
    exit_code: int | None
    error: str | None
    cost_usd: float | None
    started_at: Timestamp
    finished_at: Timestamp
    exited_at: Timestamp | None = Field(None, description="When the backend saw it end")
    recorded_at: Timestamp | None = Field(
        None, description="When its end (and snapshot rows) were committed"
    )
    resumed_from_step: int | None = Field(
        None, description="The checkpoint's last step this attempt resumed after; null: fresh"
    )
    resume_note: str | None = Field(
        None, description="Why this retry started over (checkpoint missing or rejected)"
    )


class SandboxDetail(SandboxPublic):
    attempt_history: list[AttemptPublic]
    log_dropped_bytes: int | None = Field(
        None,
        description="Bytes of the archived output that SIMPLE_LOG_BUDGET dropped (its head "
        "and tail are kept, a marker line stands for the rest); 0 or null: nothing dropped",
    )
    resume_note: str | None = Field(
        None, description="The latest attempt's resume_note: why it did not resume"
    )


class _RunFields(Public):
    run_id: str
    status: RunStatus
    backend: str
    request: dict[str, Any] = Field(description="The body the run was created with")
    budget_usd: float | None
    max_parallel: int
    cancel_requested: bool
    error: str | None
    labels: dict[str, str] = Field(
        default_factory=dict, description="The labels the run was started with"
    )
    created_at: Timestamp
    started_at: Timestamp
    finished_at: Timestamp
    purged_at: Timestamp = Field(
        None,
        description="When retention removed its logs, item files, resume copies, stage "
        "inputs and events (SIMPLE_RETENTION_DAYS after it ended); its report stays",
    )
    rerun_of: str | None = Field(
        None, description="The run this one reruns (POST /v1/runs/{id}/rerun); null if none"
    )


class RunSummary(_RunFields):
    plan: PlanPublic


class RunPage(_RunFields):
    """A run page without its plan: what changes between polls (see api/rendered.py)."""

    sandboxes: list[SandboxPublic]
    sandboxes_total: int = Field(description="Sandboxes in the run, on every page")
    sandbox_counts: dict[str, int] = Field(description="Sandboxes per status, whole run")


class RunPublic(RunPage, RunSummary):
    """A run with its sandboxes (a page of them: `limit` and `offset`, in launch order)."""


class RunList(Public):
    runs: list[RunSummary] = Field(description="Newest first")


class ItemCounts(Public):
    """Items of batch sandboxes: passed, failed (a verdict) and errored (raised)."""

    total: int
    passed: int
    failed: int
    errored: int


class ReportSandbox(Public):
    sandbox_id: str
    template_id: str
    status: SandboxStatus
    attempts: int
    exit_code: int | None
    duration_s: float | None
    cost_usd: float | None = Field(description="From its accepted snapshots; null without any")
    tokens_used: int | None
    llm_calls: int | None
    error: str | None
    items: ItemCounts = Field(description="Batch sandboxes: its items' outcomes (zeros if none)")
    steps_recorded: int = Field(0, description="Step rows aggregated from its snapshot")


class ReportTotals(Public):
    sandboxes: int
    succeeded: int
    failed: int
    cancelled: int
    skipped: int
    cost_usd: float
    tokens_used: int
    llm_calls: int
    entities_created: int
    timepoints_created: int
    mechanisms_covered: list[str]
    mechanism_coverage_pct: float
    items: ItemCounts = Field(description="Every batch sandbox's items together")


class ReportByTemplate(Public):
    template_id: str
    runs: int
    cost_usd: float | None
    tokens_used: int | None
    llm_calls: int | None
    entities_created: int | None
    timepoints_created: int | None


class ReportByMechanism(Public):
    mechanism: str
    templates_using: int
    total_cost_usd: float | None
    avg_cost_usd: float | None


class Report(Public):
    """The aggregated outcome of a run (JSON; also ?format=junit or markdown)."""

    run_id: str
    status: RunStatus
    created_at: Timestamp
    finished_at: Timestamp
    plan: PlanPublic
    labels: dict[str, str] = Field(
        default_factory=dict, description="The labels the run was started with"
    )
    sandboxes: list[ReportSandbox] = Field(
        description="A page of rows, in launch order (`limit`, `offset`); totals cover all"
    )
    sandboxes_total: int = Field(description="Rows in the whole report")
    rerun_of: str | None = Field(None, description="The run this one reruns; null if none")
    totals: ReportTotals
    by_template: list[ReportByTemplate]
    by_mechanism: list[ReportByMechanism]


class SnapshotStored(Public):
    key: str = Field(description="Where the store keeps it")
    bytes: int


SandboxIdQuery = Annotated[
    str | None, Query(max_length=63, pattern=r"^[a-z0-9-]+$", description="Only this sandbox")
]


class ItemResult(Public):
    """One item of a batch sandbox: passed, failed (with a reason) or errored (raised)."""

    sandbox_id: str
    template_id: str
    item_id: str
    status: str = Field(description="succeeded (ran to a verdict), failed (raised), skipped")
    outcome: str = Field(description="passed, failed, errored or skipped")
    passed: bool | None
    reason: str | None
    error: str | None
    duration_ms: int | None
    data: Any = None


class ItemPage(Public):
    items: list[ItemResult]
    next_after: str | None = Field(description="Pass as ?after= for the next page; null: last")
