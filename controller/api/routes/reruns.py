"""Reruns: `POST /v1/runs/{id}/rerun` starts a new run of what failed (or of all of it)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Response
from pydantic import BaseModel, ConfigDict, Field

from controller.api.deps import Authorized, ControllerDep
from controller.api.responses import ErrorResponse, RunId, RunPublic, error_responses
from controller.results.reruns import plan_rerun
from controller.runs import create_run, get_run

router = APIRouter(tags=["runs"], responses=error_responses(401, 422))


class RerunCreate(BaseModel):
    """What to rerun, and the limits of the new run (the original's unless given)."""

    model_config = ConfigDict(extra="forbid")
    scope: Literal["failed", "all"] = Field(
        "failed",
        description="`failed`: the sandboxes that failed, timed out, were lost or ran out "
        "of memory, and of batch templates the items without a passing result; `all`: "
        "every sandbox again",
    )
    budget_usd: float | None = Field(
        None, gt=0, description="Budget of the new run; default the original's"
    )
    max_parallel: int | None = Field(
        None, ge=1, le=1000, description="Sandboxes at once; default the original's"
    )


@router.post(
    "/v1/runs/{run_id}/rerun",
    dependencies=[Authorized],
    status_code=201,
    response_model=RunPublic,
    response_description="The new run; its `rerun_of` names the original",
    responses={
        200: {"model": RunPublic,
              "description": "The rerun created earlier with this Idempotency-Key and body"},
        404: {"model": ErrorResponse, "description": "No such run"},
        409: {"model": ErrorResponse, "description": "The run has not ended yet, or "
              "(scope `failed`) nothing of it failed; or an Idempotency-Key reused"},
    },
)
def rerun(
    run_id: RunId,
    controller: ControllerDep,
    response: Response,
    body: RerunCreate | None = None,
    idempotency_key: Annotated[
        str | None,
        Header(max_length=200, description="The same key and body return the same rerun"),
    ] = None,
) -> dict[str, Any]:
    """Start a new run of an ended run's failed sandboxes (or of all of them)."""
    body = body or RerunCreate()
    plan = plan_rerun(controller.engine, controller.store, controller.catalog, run_id,
                      body.scope, body.budget_usd, body.max_parallel)
    new_id, created = create_run(
        controller.engine,
        plan.catalog,
        plan.request,
        plan.body,
        backend=controller.backend.name,
        default_image=controller.settings.default_image,
        seed=plan.seed,
        idempotency_key=idempotency_key,
        store=controller.store,
        rerun_of=plan.original,
    )
    if created:
        controller.kick()
    else:
        response.status_code = 200
    return get_run(controller.engine, new_id)
