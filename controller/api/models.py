"""Request and response models of the HTTP API (pydantic, at the edge)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from controller.planner import PlanRequest, Priority
from sandbox_image.contract import EventType


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


class EventIn(BaseModel):
    """One sandbox event, as the contract defines it."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=100, description="Unique per event")
    seq: int = Field(ge=1, le=2**31 - 1, description="Increases by one per sandbox")
    type: EventType
    time: AwareDatetime
    data: dict[str, Any] = Field(default_factory=dict)

    @field_validator("data")
    @classmethod
    def _small(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(str(value)) > 64_000:
            raise ValueError("data is larger than 64 kB")
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


class EventBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    events: list[EventIn] = Field(min_length=1, max_length=1000)


class EventsAccepted(BaseModel):
    stored: list[str] = Field(description="Ids of the batch's events, all stored exactly once")
    count: int


class Health(BaseModel):
    status: str
    detail: str | None = None


class RunCreated(BaseModel):
    model_config = ConfigDict(extra="allow")
    run_id: str
    status: str
    created_at: datetime | None = None
