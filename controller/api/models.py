"""Request and response models of the HTTP API (pydantic, at the edge)."""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonDict

from controller.batches import MAX_BATCH_SIZE, MAX_ITEM_DATA_BYTES, MAX_RUN_ITEMS, check_items
from controller.planner import PlanRequest, Priority
from controller.stages import Stage, parse_policy
from controller.states import RunStatus, SandboxStatus
from sandbox_image.contract import EventType


class StageRequest(BaseModel):
    """One stage of a staged request: templates launched together, and its policy."""

    model_config = ConfigDict(extra="forbid")
    templates: list[str] = Field(min_length=1, max_length=1000, description="Template ids")
    policy: str | dict[str, int] = Field(
        "all", description='"all", "best_effort" or {"quorum": k}'
    )

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: str | dict[str, int]) -> str | dict[str, int]:
        parse_policy(value)
        return value

    def stage(self) -> Stage:
        return Stage(tuple(self.templates), parse_policy(self.policy))


class RunCreate(BaseModel):
    """What to run: suites, templates and categories, and/or a free-text query."""

    model_config = ConfigDict(extra="forbid")
    names: list[str] = Field(
        default_factory=list, description="Suite names or template ids (a suite wins)"
    )
    suites: list[str] = Field(default_factory=list, description="Suite names, e.g. quick")
    templates: list[str] = Field(default_factory=list, description="Template ids")
    categories: list[str] = Field(default_factory=list, description="Template categories")
    query: str | None = Field(
        None, max_length=2000, description='Free text, e.g. "portal templates under $50, fast"'
    )
    budget_usd: float | None = Field(
        None, gt=0, description="Hard limit on estimated and reported cost"
    )
    priority: Priority = Field(Priority.BALANCED, description="speed, cost or balanced")
    max_parallel: int | None = Field(None, ge=1, le=1000, description="Sandboxes at once")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Base seed for deterministic runs")
    stages: list[StageRequest] | None = Field(
        None,
        max_length=32,
        description="Run in stages: stage N+1 starts when stage N met its policy",
    )
    confirm_over: bool = Field(
        False,
        description="When a sandbox's cost passes SIMPLE_COST_ALERT_RATIO x its estimate, "
        "stop launching until POST /v1/runs/{id}/confirm",
    )
    items: list[dict[str, Any]] | None = Field(
        None,
        max_length=MAX_RUN_ITEMS,
        description='Ad-hoc items for the one template named: [{"item_id", "data"}]; at most '
        f"{MAX_RUN_ITEMS}, {MAX_ITEM_DATA_BYTES} bytes of data each",
    )
    batch_size: int | None = Field(
        None, ge=1, le=MAX_BATCH_SIZE, description="Items per sandbox at most (default 100)"
    )

    def plan_request(self) -> PlanRequest:
        return PlanRequest(
            names=tuple(self.names),
            suites=tuple(self.suites),
            templates=tuple(self.templates),
            categories=tuple(self.categories),
            query=self.query,
            budget_usd=self.budget_usd,
            priority=self.priority,
            max_parallel=self.max_parallel,
            stages=tuple(s.stage() for s in self.stages or ()),
            items=None if self.items is None else check_items(self.items, "request"),
            batch_size=self.batch_size,
        )


class ErrorDetail(BaseModel):
    code: str = Field(description="Machine-readable error code")
    message: str = Field(description="What was wrong")
    hint: str | None = Field(None, description="What to do")
    field: str | None = Field(None, description="The offending field, when there is one")


class ErrorResponse(BaseModel):
    error: ErrorDetail


class FailureError(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = Field(min_length=1, max_length=200)
    message: str = Field(max_length=10_000)
    transient: bool


# What `_failed_has_error` checks, said in the schema too, so clients and API tools see it.
_FAILED_NEEDS_ERROR: JsonDict = {
    "if": {"properties": {"type": {"const": "failed"}}, "required": ["type"]},
    "then": {
        "properties": {
            "data": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["type", "message", "transient"],
                        "properties": {
                            "type": {"type": "string", "minLength": 1, "maxLength": 200},
                            "message": {"type": "string", "maxLength": 10_000},
                            "transient": {"type": "boolean"},
                        },
                    }
                },
            }
        },
        "required": ["data"],
    },
}


class EventIn(BaseModel):
    """One sandbox event, as the contract defines it."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_FAILED_NEEDS_ERROR)
    id: str = Field(
        min_length=1, max_length=100, pattern=r"^[^\x00]+$", description="Unique per event"
    )
    seq: int = Field(ge=1, le=2**31 - 1, description="Increases by one per sandbox")
    type: EventType
    time: AwareDatetime
    data: dict[str, Any] = Field(default_factory=dict)

    @field_validator("data")
    @classmethod
    def _small(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(str(value)) > 64_000:
            raise ValueError("data is larger than 64 kB")
        bad = _bad_number(value, "data")
        if bad:
            raise ValueError(bad)
        return value

    @model_validator(mode="after")
    def _failed_has_error(self) -> EventIn:
        if self.type is EventType.FAILED:
            error = self.data.get("error")
            if not isinstance(error, dict):
                raise ValueError(
                    "data.error is required for `failed` events: "
                    '{"type": ..., "message": ..., "transient": true|false}'
                )
            try:
                FailureError.model_validate(error)
            except ValidationError as e:
                where = ".".join(str(p) for p in e.errors()[0]["loc"])
                raise ValueError(f"data.error.{where}: {e.errors()[0]['msg']}") from None
        return self


def _bad_number(value: Any, where: str) -> str | None:
    """Why a number in a sandbox's event data is refused: not finite, or negative.

    Costs, tokens and every other number a sandbox reports are finite and >= 0, as in
    snapshots: a negative cost would offset another sandbox's, an infinite one would
    poison every total (and is not JSON).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        if not math.isfinite(value):
            return f"{where} is {value}: numbers must be finite"
        if value < 0:
            return f"{where} is {value}: numbers must be >= 0"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(
        value, list
    ) else ()
    for key, item in items:
        bad = _bad_number(item, f"{where}.{key}")
        if bad:
            return bad
    return None


class EventBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    events: list[EventIn] = Field(min_length=1, max_length=1000)


class EventsAccepted(BaseModel):
    stored: list[str] = Field(description="Ids of the batch's events, all stored exactly once")
    count: int


class Health(BaseModel):
    status: str
    detail: str | None = None


# --- Responses -------------------------------------------------------------------------
# Each response model allows extra fields, so a field added on the server side shows
# up at once; the fields listed here are the contract clients may rely on.

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
    "or a cap is reached: the sandbox's events per attempt, or log followers",
    503: "A dependency (database, store, backend) is unavailable; retry later "
    "(events: after Retry-After)",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for FastAPI: each code with the ErrorResponse model."""
    return {
        code: {"model": ErrorResponse, "description": ERROR_DESCRIPTIONS[code]} for code in codes
    }


class _Public(BaseModel):
    model_config = ConfigDict(extra="allow")


class Estimate(_Public):
    cost_usd: list[float] = Field(min_length=2, max_length=2, description="[min, max] in USD")
    runtime_s: list[float] = Field(min_length=2, max_length=2, description="[min, max] seconds")


class Resources(_Public):
    cpu: str
    memory: str


class TemplatePublic(_Public):
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


class TemplateList(_Public):
    templates: list[TemplatePublic]
    count: int
    suites: dict[str, list[str]] = Field(description="Suite name to template ids")


class Exclusion(_Public):
    template_id: str
    reason: str


class ReadPhrase(_Public):
    text: str = Field(description="The words of the request")
    meaning: str = Field(description="What they became")


class ChoicePublic(_Public):
    key: str = Field(description="A, B, C...")
    label: str
    suites: list[str]
    templates: list[str]
    count: int = Field(description="How many templates it selects")
    estimated_cost_usd: list[float] = Field(min_length=2, max_length=2)


class Interpretation(_Public):
    """How a free-text request was read: every phrase, and what was not understood."""

    text: str
    phrases: list[ReadPhrase]
    not_understood: list[str] = Field(description="Words that were not read as anything")
    notes: list[str] = Field(description="Decisions worth knowing, e.g. conflicting values")
    choices: list[ChoicePublic] = Field(description="Set when the request was ambiguous")


class PlanPublic(_Public):
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


class SandboxPublic(_Public):
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


class AttemptPublic(_Public):
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
    resume_note: str | None = Field(
        None, description="The latest attempt's resume_note: why it did not resume"
    )


class _RunFields(_Public):
    run_id: str
    status: RunStatus
    backend: str
    request: dict[str, Any] = Field(description="The body the run was created with")
    budget_usd: float | None
    max_parallel: int
    cancel_requested: bool
    error: str | None
    created_at: Timestamp
    started_at: Timestamp
    finished_at: Timestamp


class RunSummary(_RunFields):
    plan: PlanPublic


class RunPage(_RunFields):
    """A run page without its plan: what changes between polls (see api/rendered.py)."""

    sandboxes: list[SandboxPublic]
    sandboxes_total: int = Field(description="Sandboxes in the run, on every page")
    sandbox_counts: dict[str, int] = Field(description="Sandboxes per status, whole run")


class RunPublic(RunPage, RunSummary):
    """A run with its sandboxes (a page of them: `limit` and `offset`, in launch order)."""


class RunList(_Public):
    runs: list[RunSummary] = Field(description="Newest first")


class ItemCounts(_Public):
    """Items of batch sandboxes: passed, failed (a verdict) and errored (raised)."""

    total: int
    passed: int
    failed: int
    errored: int


class ReportSandbox(_Public):
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


class ReportTotals(_Public):
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


class ReportByTemplate(_Public):
    template_id: str
    runs: int
    cost_usd: float | None
    tokens_used: int | None
    llm_calls: int | None
    entities_created: int | None
    timepoints_created: int | None


class ReportByMechanism(_Public):
    mechanism: str
    templates_using: int
    total_cost_usd: float | None
    avg_cost_usd: float | None


class Report(_Public):
    """The aggregated outcome of a run (JSON; also ?format=junit or markdown)."""

    run_id: str
    status: RunStatus
    created_at: Timestamp
    finished_at: Timestamp
    plan: PlanPublic
    sandboxes: list[ReportSandbox] = Field(
        description="A page of rows, in launch order (`limit`, `offset`); totals cover all"
    )
    sandboxes_total: int = Field(description="Rows in the whole report")
    totals: ReportTotals
    by_template: list[ReportByTemplate]
    by_mechanism: list[ReportByMechanism]


class SnapshotStored(_Public):
    key: str = Field(description="Where the store keeps it")
    bytes: int


class StreamedEvent(_Public):
    """`data` of a `sandbox-event` message: one event a sandbox posted, as stored."""

    id: int = Field(description="Its place in the run's stream (the message id)")
    sandbox_id: str
    event_id: str
    attempt: int
    seq: int
    type: str = Field(
        description="started, progress, error, completed or failed; `alert` (seq 0) is the "
        "controller's cost alert for that sandbox"
    )
    time: Timestamp
    data: dict[str, Any]


class StreamEnd(_Public):
    """`data` of the `end` message: the run is over."""

    run_id: str
    status: RunStatus


SandboxIdQuery = Annotated[
    str | None, Query(max_length=63, pattern=r"^[a-z0-9-]+$", description="Only this sandbox")
]


class ItemResult(_Public):
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


class ItemPage(_Public):
    items: list[ItemResult]
    next_after: str | None = Field(description="Pass as ?after= for the next page; null: last")
