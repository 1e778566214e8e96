"""Large answers validated and serialized by pydantic in one step, straight to bytes.

A route that returns a dict lets FastAPI validate it against the response model and
then serialize it through its generic path, several times the cost of pydantic doing
both itself. The run page (a 1,000-sandbox run's is ~130 kB, most of it the plan) is
polled by every dashboard and CI job, so its cost is the API's. The route keeps its
`response_model` for the OpenAPI document; the answer is the same model's JSON.

A plan never changes once its run is written, so the run page's plan is validated and
serialized once per process (controller.db.plans) and spliced into each answer.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import Response
from pydantic import BaseModel, TypeAdapter
from sqlalchemy import Engine

from controller.api.responses import PlanPublic, RunPage
from controller.db.plans import rendered_plan


@cache
def _adapter(model: type[BaseModel]) -> TypeAdapter[Any]:
    return TypeAdapter(model)


def run_response(engine: Engine, page: dict[str, Any]) -> Response:
    """A `RunPublic` answer: the page validated and serialized but for its plan, whose
    JSON is kept per run."""
    fields = dict(page)
    plan = fields.pop("plan")
    head = _json(RunPage, fields)
    plan_json = rendered_plan(engine, page["run_id"], plan, _render_plan)
    return Response(
        content=head[:-1] + b',"plan":' + plan_json + b"}", media_type="application/json"
    )


def _render_plan(plan: Any) -> bytes:
    return _json(PlanPublic, plan)


def _json(model: type[BaseModel], value: Any) -> bytes:
    """`value` validated as `model`, as that model's JSON (a ValidationError is a bug)."""
    adapter = _adapter(model)
    return adapter.dump_json(adapter.validate_python(value))
