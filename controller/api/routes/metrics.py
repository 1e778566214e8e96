"""GET /metrics: the Prometheus page (see docs/observability.md)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from controller import metrics
from controller.api.auth import token_listed
from controller.api.deps import BearerCredentials, ControllerDep
from controller.api.responses import error_responses
from controller.errors import UnauthorizedError

router = APIRouter(tags=["health"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
            "description": "Prometheus text exposition format",
        },
        **error_responses(401),
    },
)
async def get_metrics(controller: ControllerDep, credentials: BearerCredentials = None) -> Response:
    """Prometheus metrics; needs an API token or SIMPLE_METRICS_TOKEN when any is set."""
    settings = controller.settings
    accepted = [*settings.api_tokens, *([settings.metrics_token] if settings.metrics_token else [])]
    if accepted:
        token = credentials.credentials.strip() if credentials else ""
        if not token or not token_listed(token, accepted):
            raise UnauthorizedError(
                "GET /metrics needs a token",
                hint="configure the scraper with `Authorization: Bearer <token>`, a token from "
                "SIMPLE_API_TOKENS or SIMPLE_METRICS_TOKEN",
            )
    depth = controller.event_writer.depth
    reconciler = controller.reconciler
    passes = list(reconciler.pass_seconds) if reconciler is not None else None
    page = await asyncio.to_thread(metrics.render, controller.engine, depth, passes)
    return Response(page, media_type=CONTENT_TYPE_LATEST)
