"""`simplectl run --dry-run`: what would be created, rendered by the chosen backend, offline."""

from __future__ import annotations

from typing import Any

from controller.backends import create_backend
from controller.catalog import Catalog
from controller.launcher import build_sandbox_spec
from controller.planner import PlanRequest, plan
from controller.runs import new_run_id, sandbox_id_for, sandbox_spec
from controller.settings import Settings

PLACEHOLDER_TOKEN = "<generated at launch>"


def render_run(
    catalog: Catalog, request: PlanRequest, settings: Settings, seed: int = 0
) -> dict[str, Any]:
    """The plan and, for each selected template, the object the backend would create."""
    the_plan = plan(catalog, request)
    backend = create_backend(settings)
    run_id = new_run_id()
    controller_url = settings.resolved_controller_url
    objects = []
    stage_of = {t: s["index"] for s in the_plan.stages for t in s["templates"]}
    for position, template_id in enumerate(the_plan.selected):
        sandbox_id = sandbox_id_for(run_id, template_id, position)
        spec = sandbox_spec(catalog.templates[template_id], seed, settings.default_image)
        upload = f"{controller_url}/v1/sandboxes/{sandbox_id}/snapshot?attempt=1&signature=<...>"
        # A later stage reads the stage before it (made when that stage has settled).
        given = f"{controller_url}/v1/sandboxes/{sandbox_id}/input?attempt=1&signature=<...>"
        objects.append(
            backend.render(
                build_sandbox_spec(
                    run_id,
                    sandbox_id,
                    template_id,
                    spec,
                    1,
                    PLACEHOLDER_TOKEN,
                    upload,
                    controller_url,
                    input_url=given if stage_of.get(template_id, 0) > 0 else None,
                )
            )
        )
    return {
        "run_id": run_id,
        "backend": backend.name,
        "plan": the_plan.to_dict(),
        "objects": objects,
    }
