"""The FastAPI application: routers, error handlers, controller lifecycle. A controller in
the `reconciler` role gets only /healthz, /readyz and /metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse

from controller import __version__
from controller.api.body_guard import BodyGuard
from controller.api.deps import attach
from controller.api.errors import install_error_handlers
from controller.api.hosts import HostGuard, allowed_hosts
from controller.api.routes import (
    accounting,
    chat,
    health,
    maintenance,
    metrics,
    reruns,
    runs,
    sandboxes,
    stream,
    templates,
)
from controller.api.web import access, chat_panel, pages
from controller.api.web.security import CsrfGuard
from controller.logs import RequestContextMiddleware
from controller.principal.assistant import create_principal
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
        # FastAPI's /docs and /redoc load their scripts from a CDN, unpinned, on the
        # dashboard's origin: not served. The schema is GET /openapi.json.
        docs_url=None,
        redoc_url=None,
    )
    attach(app, controller, create_principal(controller))
    app.add_middleware(RequestContextMiddleware)
    install_error_handlers(app)
    routers: tuple[Any, ...] = (health, metrics)  # a reconciler serves only these
    if controller.role != "reconciler":
        routers += (templates, runs, stream, sandboxes, accounting, chat, access,
                    maintenance, reruns, pages, chat_panel)
    for module in routers:
        app.include_router(module.router)
    sessions = app.state.sessions
    app.add_middleware(CsrfGuard, tokens=lambda: controller.settings.api_tokens,
                       sessions=sessions)
    # Sizes and credentials are judged before anything reads a body; the Host even before.
    app.add_middleware(
        BodyGuard,
        settings=controller.settings,
        engine=lambda: controller.engine,
        routes=lambda: app.router.routes,
        sessions=sessions,
    )
    app.add_middleware(HostGuard, hosts=allowed_hosts(controller.settings))

    @app.exception_handler(access.LoginRequired)
    async def _login_required(_request: Request, exc: access.LoginRequired) -> RedirectResponse:
        return access.login_redirect(exc.target)

    return app
