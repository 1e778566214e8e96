"""The catalog and planning without running."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from controller.api.deps import Authorized, ControllerDep
from controller.api.requests import RunCreate
from controller.api.responses import PlanPublic, TemplateList, error_responses
from controller.errors import UnknownNameError
from controller.planning.plan import plan
from controller.results.estimates import planning_catalog

router = APIRouter(
    prefix="/v1",
    tags=["templates"],
    dependencies=[Authorized],
    responses=error_responses(401, 422),
)


@router.get("/templates", response_model=TemplateList)
def list_templates(
    controller: ControllerDep,
    suite: str | None = None,
    category: str | None = None,
    tag: str | None = None,
) -> dict[str, Any]:
    """The catalog, filterable by suite, category and tag."""
    catalog = controller.catalog
    if suite and suite not in catalog.suites:
        raise UnknownNameError(
            f"unknown suite {suite!r}",
            hint=f"known suites: {', '.join(sorted(catalog.suites))}",
            field="suite",
        )
    members = set(catalog.suites[suite]) if suite else None
    templates = [
        t.public()
        for t in catalog.templates.values()
        if (members is None or t.id in members)
        and (category is None or t.category == category)
        and (tag is None or tag in t.tags)
    ]
    return {
        "templates": templates,
        "count": len(templates),
        "suites": {name: list(ids) for name, ids in sorted(catalog.suites.items())},
    }


@router.post("/plans", response_model=PlanPublic, responses=error_responses(400))
def create_plan(body: RunCreate, controller: ControllerDep) -> dict[str, Any]:
    """Plan without running: what would be selected, excluded, and what it would cost."""
    catalog, sources = planning_catalog(controller.engine, controller.catalog)
    return plan(catalog, body.plan_request(), sources).to_dict()
