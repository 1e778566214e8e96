"""Planning a staged run: each stage ordered by the priority, the budget over all
stages, per-stage estimates, and a runtime along the stages (the critical path).

Pure, like the planner whose helpers it uses; `controller.planning.plan.plan` calls it
for a request with `stages` or for a staged suite named on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.catalog.stages import Stage, check_stages
from controller.catalog.templates import Catalog, Template
from controller.errors import InputError
from controller.planning.plan import (
    Plan,
    PlanRequest,
    _fit_budget,
    _is_expensive,
    _makespan,
    _order,
    _parallelism,
    _per_sandbox,
    _scaled,
    critical_path,
    with_items,
)


def requested_stages(catalog: Catalog, request: PlanRequest) -> tuple[Stage, ...]:
    """The request's stages, or a staged suite's when it is the only thing named."""
    if request.stages:
        if request.names or request.suites or request.templates or request.categories:
            raise InputError(
                "a request with `stages` names its templates there only",
                hint="move names, suites, templates and categories into the stages",
                field="stages",
            )
        try:
            check_stages(request.stages, "request")
        except ValueError as e:
            raise InputError(str(e), field="stages") from None
        for stage in request.stages:
            for template_id in stage.templates:
                catalog.template(template_id)
        return request.stages
    named = [*request.names, *request.suites]
    staged = [n for n in named if n in catalog.staged]
    if not staged:
        return ()
    if len(named) > 1 or request.templates or request.categories:
        raise InputError(
            f"staged suite {staged[0]!r} must be run on its own",
            hint="name only the staged suite, or send `stages` in the request",
            field="suites",
        )
    return catalog.staged[staged[0]]


def plan_staged(catalog: Catalog, request: PlanRequest, stages: tuple[Stage, ...]) -> Plan:
    """Each stage ordered by the priority; the budget over all; runtime along the stages."""
    ordered = [
        _order(
            [_scaled(with_items(catalog, request, t)) for t in stage.templates], request.priority
        )
        for stage in stages
    ]
    selected, excluded = _fit_budget([t for group in ordered for t in group], request.budget_usd)
    kept = {t.id for t in selected}
    groups = [[t for t in group if t.id in kept] for group in ordered]
    for index, (stage, group) in enumerate(zip(stages, groups, strict=True)):
        if not group or (stage.policy.quorum or 0) > len(group):
            raise InputError(
                f"stage {index} keeps {len(group)} templates within the budget, too few for "
                f"its policy ({stage.policy.describe()})",
                hint="raise budget_usd or change the stage",
                field="budget_usd",
            )
    max_parallel, max_expensive = _parallelism(max(groups, key=len), request)
    described: list[dict[str, Any]] = [
        {
            "index": index,
            "templates": [t.id for t in group],
            "policy": stage.policy.public(),
            "estimated_cost_usd": list(_cost(group)),
            "estimated_runtime_s": [
                _makespan(_per_sandbox(group, 0), max_parallel),
                _makespan(_per_sandbox(group, 1), max_parallel),
            ],
        }
        for index, (stage, group) in enumerate(zip(stages, groups, strict=True))
    ]
    return Plan(
        selected=tuple(t.id for t in selected),
        excluded=tuple(excluded),
        estimated_cost_usd=_cost(selected),
        estimated_runtime_s=(
            round(sum(s["estimated_runtime_s"][0] for s in described), 3),
            round(sum(s["estimated_runtime_s"][1] for s in described), 3),
        ),
        max_parallel=max_parallel,
        max_parallel_expensive=max_expensive,
        priority=request.priority,
        budget_usd=request.budget_usd,
        expensive=tuple(t.id for t in selected if _is_expensive(t)),
        max_runtime_s=request.max_runtime_s,
        stages=tuple(described),
        critical_path=tuple(p for group in groups for p in critical_path(group)),
    )


def _cost(templates: list[Template]) -> tuple[float, float]:
    return (
        round(sum(t.cost_usd[0] for t in templates), 2),
        round(sum(t.cost_usd[1] for t in templates), 2),
    )


def estimates(
    catalog: Catalog, selected: tuple[str, ...], sources: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Per selected template, the estimate planned with and where it comes from."""
    return {
        t: {
            "cost_usd": list(catalog.templates[t].cost_usd),
            "runtime_s": list(catalog.templates[t].runtime_s),
            "estimate_source": sources.get(t, "catalog"),
        }
        for t in selected
    }
