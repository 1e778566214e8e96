"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from controller.api.deps import ControllerDep
from controller.api.errors import error_body
from controller.api.responses import ErrorResponse, Health, Leader
from controller.errors import SimpleError

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """The process is alive."""
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses={503: {"model": ErrorResponse}})
def readyz(controller: ControllerDep) -> Health | JSONResponse:
    """Database reachable and migrated, store and backend usable; who leads the
    reconcilers (a standby is ready: it takes over when the lease is free)."""
    try:
        controller.check_ready()
        leader = Leader(**controller.leader())
    except SimpleError as e:
        return JSONResponse(error_body("not_ready", e.message, e.hint), status_code=503)
    return Health(status="ready", leader=leader)
