"""Our error tree mapped to JSON HTTP responses, in one place."""

from __future__ import annotations

import logging
import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from controller.api.body_guard import BodyTooLarge
from controller.errors import InputError, SimpleError, UnauthorizedError
from controller.intake.ingest import DATABASE_RETRY_AFTER_S

logger = logging.getLogger(__name__)


def error_body(
    code: str, message: str, hint: str | None = None, field: str | None = None
) -> dict[str, object]:
    return {"error": {"code": code, "message": message, "hint": hint, "field": field}}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(SimpleError)
    async def _simple_error(_request: Request, exc: SimpleError) -> JSONResponse:
        field = exc.field if isinstance(exc, InputError) else None
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, UnauthorizedError) else {}
        if exc.retry_after_s is not None:
            headers["Retry-After"] = str(exc.retry_after_s)
        if exc.status_code >= 500:
            logger.warning("%s: %s", exc.code, exc)
        return JSONResponse(
            error_body(exc.code, exc.message, exc.hint, field),
            status_code=exc.status_code,
            headers=headers,
        )

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        if first.get("type") == "json_invalid":
            return JSONResponse(
                error_body(
                    "invalid_input",
                    f"the body is not valid JSON: {first['msg']}",
                    "send a JSON object",
                ),
                status_code=422,
            )
        loc = [str(p) for p in first["loc"] if p != "body"]
        field = ".".join(loc) or None
        message = f"{field}: {first['msg']}" if field else str(first["msg"])
        return JSONResponse(
            error_body("invalid_input", message, "fix the field and send again", field),
            status_code=422,
        )

    @app.exception_handler(BodyTooLarge)
    async def _too_large(_request: Request, exc: BodyTooLarge) -> JSONResponse:
        return JSONResponse(
            error_body("payload_too_large", str(exc.detail), exc.hint),
            status_code=413,
            headers={"Connection": "close"},
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        hint = "see GET /openapi.json for the API" if exc.status_code in (404, 405) else None
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # every method the path has, not only the first route's
            allowed = _allowed_methods(app, request.url.path)
            headers["Allow"] = ", ".join(allowed)
            hint = f"this path takes {', '.join(allowed)}"
        return JSONResponse(
            error_body(f"http_{exc.status_code}", str(exc.detail), hint),
            status_code=exc.status_code,
            headers=headers,
        )

    @app.exception_handler(OperationalError)
    async def _database_away(_request: Request, exc: OperationalError) -> JSONResponse:
        logger.warning("database unavailable: %s", str(exc).splitlines()[0] if str(exc) else exc)
        return JSONResponse(
            error_body(
                "unavailable",
                "the controller's database is unavailable",
                "retry after Retry-After seconds; the controller recovers when the database does",
            ),
            status_code=503,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error")
        return JSONResponse(
            error_body(
                "internal_error",
                f"internal error: {type(exc).__name__}",
                "see the controller's log",
            ),
            status_code=500,
        )


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the API documents for `path`, from its OpenAPI paths."""
    methods: set[str] = set()
    for template, item in app.openapi()["paths"].items():
        pattern = re.sub(r"\\{[^/]+\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path):
            methods.update(m.upper() for m in item if m in _HTTP_METHODS)
    return sorted(methods)


_HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}
