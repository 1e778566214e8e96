"""Request models of the HTTP API (pydantic, at the edge): what clients and sandboxes send,
and the bounds it is checked against. The response models are in `responses.py`."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonDict

from controller.catalog.batches import (
    MAX_BATCH_SIZE,
    MAX_ITEM_DATA_BYTES,
    MAX_RUN_ITEMS,
    check_items,
)
from controller.catalog.stages import Stage, parse_policy
from controller.planning.model import PlanRequest, Priority
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


MAX_LABELS = 32
# Like a Kubernetes label name (a prefix/ allowed): starts and ends with a letter or digit.
LABEL_KEY_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$"
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
# A value is shown on pages and in reports: one line, no control characters.
LabelValue = Annotated[str, StringConstraints(max_length=500, pattern=r"^[^\x00-\x1f\x7f]*$")]


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
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        max_length=MAX_LABELS,
        description="What started the run, as key=value pairs (e.g. commit, ref, "
        "pipeline_url); shown with the run and its reports, filterable in GET /v1/runs",
        json_schema_extra={"additionalProperties": False},  # only keys of the pattern
    )

    def plan_request(self) -> PlanRequest:
        """The planner's request; a priority the client did not send is left to the query."""
        return PlanRequest(
            names=tuple(self.names),
            suites=tuple(self.suites),
            templates=tuple(self.templates),
            categories=tuple(self.categories),
            query=self.query,
            budget_usd=self.budget_usd,
            priority=self.priority if "priority" in self.model_fields_set else None,
            max_parallel=self.max_parallel,
            stages=tuple(s.stage() for s in self.stages or ()),
            items=None if self.items is None else check_items(self.items, "request"),
            batch_size=self.batch_size,
        )


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
