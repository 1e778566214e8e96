"""The FastAPI application: routers, error handlers, controller lifecycle."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from controller import __version__
from controller.api.errors import install_error_handlers
from controller.api.routes import accounting, health, runs, sandboxes, stream, templates
from controller.service import Controller


def create_app(controller: Controller, manage_lifecycle: bool = True) -> FastAPI:
    """The API over `controller`; with `manage_lifecycle` it starts and stops it."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if manage_lifecycle and not controller.started:
            controller.start()
        yield
        if manage_lifecycle:
            controller.close()

    app = FastAPI(
        title="SIMPLE controller",
        version=__version__,
        lifespan=lifespan,
        description="Runs simulation templates in parallel, one sandbox each.",
    )
    app.state.controller = controller
    install_error_handlers(app)
    for module in (health, templates, runs, stream, sandboxes, accounting):
        app.include_router(module.router)
    return app
