"""`simplectl run --dry-run`: what would be created, rendered by the chosen backend, offline."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controller.attempts.launcher import build_sandbox_spec
from controller.backends import create_backend
from controller.catalog.templates import Catalog
from controller.planning.model import PlanRequest
from controller.planning.plan import plan
from controller.runs import new_run_id, sandbox_rows
from controller.settings import Settings

PLACEHOLDER_TOKEN = "<generated at launch>"


def render_run(
    catalog: Catalog, request: PlanRequest, settings: Settings, seed: int = 0
) -> dict[str, Any]:
    """The plan and, for each sandbox (a batch template has one per batch), the object the
    backend would create."""
    the_plan = plan(catalog, request)
    backend = create_backend(settings)
    run_id = new_run_id()
    controller_url = settings.resolved_controller_url
    objects = []
    for row, _items in sandbox_rows(run_id, the_plan, catalog, settings.default_image, seed):
        sandbox_id = row["id"]
        upload = f"{controller_url}/v1/sandboxes/{sandbox_id}/snapshot?attempt=1&signature=<...>"
        # A later stage reads the stage before it (made when that stage has settled).
        given = f"{controller_url}/v1/sandboxes/{sandbox_id}/inputs/stage?attempt=1&signature=<...>"
        spec = build_sandbox_spec(
            run_id,
            sandbox_id,
            row["template_id"],
            row["spec"],
            1,
            PLACEHOLDER_TOKEN,
            upload,
            controller_url,
            input_url=given if row["stage"] > 0 else None,
        )
        if row["spec"].get("items"):  # the URL is made at launch (presigned or signed)
            items_url = f"<GET of {row['spec']['items']['count']} items, made at launch>"
            spec = replace(spec, env=replace(spec.env, items_url=items_url))
        objects.append(backend.render(spec))
    return {
        "run_id": run_id,
        "backend": backend.name,
        "plan": the_plan.to_dict(),
        "objects": objects,
    }
