"""The values of planning: what was asked (`PlanRequest`) and what was decided (`Plan`).

Frozen and free of rules: the rules that fill a `Plan` are in `sizing`, `plan` and
`staged`. `Plan.to_dict` is the shape stored on a run and served by the API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from controller.catalog.batches import WorkItem
from controller.catalog.stages import Stage


class Priority(StrEnum):
    SPEED = "speed"
    COST = "cost"
    BALANCED = "balanced"


DEFAULT_PRIORITY = Priority.BALANCED


@dataclass(frozen=True)
class PlanRequest:
    """What the user asked for. A field left at None was not asked for: a free-text
    `query` may fill it, and the planner's default applies after that."""

    names: tuple[str, ...] = ()  # each a suite or a template id (a suite wins)
    suites: tuple[str, ...] = ()
    templates: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    query: str | None = None
    budget_usd: float | None = None
    priority: Priority | None = None  # None: the query's, else DEFAULT_PRIORITY
    max_parallel: int | None = None
    items: tuple[WorkItem, ...] | None = None  # ad-hoc items for the one template named
    batch_size: int | None = None
    stages: tuple[Stage, ...] = ()  # a staged request; else a staged suite named alone
    exclude: tuple[str, ...] = ()  # template ids left out on request ("but not portal-test")
    max_runtime_s: float | None = None  # templates that may run longer are left out

    @property
    def chosen_priority(self) -> Priority:
        """The priority to plan with: the one asked for, else the default (only here)."""
        return DEFAULT_PRIORITY if self.priority is None else self.priority


@dataclass(frozen=True)
class Exclusion:
    template_id: str
    reason: str


@dataclass(frozen=True)
class BatchPlan:
    """How a batch template's items split into sandboxes: the items of each, launch order."""

    template_id: str
    batch_size: int
    batches: tuple[tuple[WorkItem, ...], ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        """Items per sandbox, in launch order."""
        return tuple(len(b) for b in self.batches)

    def to_dict(self) -> dict[str, Any]:
        return {"template_id": self.template_id, "items": sum(self.sizes),
                "batch_size": self.batch_size, "sandboxes": len(self.sizes),
                "items_per_sandbox": [min(self.sizes), max(self.sizes)]}


@dataclass(frozen=True)
class PlannedSandbox:
    """One sandbox of the plan: a template, or one batch of a batch template's items."""

    template_id: str
    stage: int  # 0-based; 0 for a flat run
    expensive: bool  # counts against `max_parallel_expensive`
    batch: int | None = None  # 1-based number of the batch; None for a template without items
    items: tuple[WorkItem, ...] = ()


@dataclass(frozen=True)
class Plan:
    """The pure result of planning."""

    selected: tuple[str, ...]
    excluded: tuple[Exclusion, ...]
    estimated_cost_usd: tuple[float, float]
    estimated_runtime_s: tuple[float, float]
    max_parallel: int
    max_parallel_expensive: int | None
    priority: Priority
    budget_usd: float | None
    expensive: tuple[str, ...] = field(default=())
    batches: tuple[BatchPlan, ...] = field(default=())
    max_runtime_s: float | None = None
    interpretation: dict[str, Any] | None = field(default=None, compare=False)
    stages: tuple[dict[str, Any], ...] = ()  # staged runs: each stage with its estimates
    critical_path: tuple[str, ...] = ()  # the template that ends last, stage by stage
    estimates: dict[str, dict[str, Any]] = field(default_factory=dict)

    def sandboxes(self) -> tuple[PlannedSandbox, ...]:
        """Every sandbox to launch, in launch order, as this plan decided it."""
        batches = {b.template_id: b.batches for b in self.batches}
        stage_of = {t: s["index"] for s in self.stages for t in s["templates"]}
        expensive = set(self.expensive)
        planned: list[PlannedSandbox] = []
        for template_id in self.selected:
            stage, costly = stage_of.get(template_id, 0), template_id in expensive
            if template_id not in batches:
                planned.append(PlannedSandbox(template_id, stage, costly))
                continue
            planned.extend(PlannedSandbox(template_id, stage, costly, number, items)
                           for number, items in enumerate(batches[template_id], 1))
        return tuple(planned)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stages": list(self.stages),
            "critical_path": list(self.critical_path),
            "estimates": self.estimates,
            "batches": [b.to_dict() for b in self.batches],
            "selected": list(self.selected),
            "excluded": [{"template_id": e.template_id, "reason": e.reason} for e in self.excluded],
            "estimated_cost_usd": list(self.estimated_cost_usd),
            "estimated_runtime_s": list(self.estimated_runtime_s),
            "max_parallel": self.max_parallel,
            "max_parallel_expensive": self.max_parallel_expensive,
            "expensive": list(self.expensive),
            "priority": self.priority.value,
            "budget_usd": self.budget_usd,
            "max_runtime_s": self.max_runtime_s,
            "interpretation": self.interpretation,
        }
