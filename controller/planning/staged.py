"""Planning a staged run: each stage ordered by the priority, the budget over all
stages, per-stage estimates, and a runtime along the stages (the critical path).

Pure, with the rules of `sizing`; `controller.planning.plan.plan` calls it for a request
with `stages` or for a staged suite named on its own.
"""

from __future__ import annotations

from typing import Any

from controller.catalog.stages import Stage, check_stages
from controller.catalog.templates import Catalog
from controller.errors import InputError
from controller.planning.model import Plan, PlanRequest
from controller.planning.sizing import (
    assemble_plan,
    cost_range,
    critical_path,
    fit_budget,
    order,
    parallelism,
    runtime_range,
    scaled,
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
        order([scaled(with_items(catalog, request, t)) for t in stage.templates],
              request.chosen_priority)
        for stage in stages
    ]
    selected, excluded = fit_budget([t for group in ordered for t in group], request.budget_usd)
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
    slots = parallelism(max(groups, key=len), request)
    described: list[dict[str, Any]] = [
        {
            "index": index,
            "templates": [t.id for t in group],
            "policy": stage.policy.public(),
            "estimated_cost_usd": list(cost_range(group)),
            "estimated_runtime_s": list(runtime_range(group, slots[0])),
        }
        for index, (stage, group) in enumerate(zip(stages, groups, strict=True))
    ]
    return assemble_plan(
        request, selected, excluded, slots=slots,
        runtime_s=(round(sum(s["estimated_runtime_s"][0] for s in described), 3),
                   round(sum(s["estimated_runtime_s"][1] for s in described), 3)),
        path=tuple(p for group in groups for p in critical_path(group)),
        stages=tuple(described),
    )
