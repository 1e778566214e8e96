"""Dependencies shared by the routes: the controller, and API-token auth."""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated

from fastapi import Cookie, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from controller.api.web.security import SESSION_COOKIE, session_valid
from controller.errors import UnauthorizedError
from controller.service import Controller


def get_controller(request: Request) -> Controller:
    controller: Controller = request.app.state.controller
    return controller


ControllerDep = Annotated[Controller, Depends(get_controller)]

# Declared in the OpenAPI schema (so /docs and API tools know to send it); the check
# itself is ours, so a missing or wrong token gets our JSON error with a hint.
api_token_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="apiToken",
    description="A token from the server's SIMPLE_API_TOKENS (needed when any are set).",
)
BearerCredentials = Annotated[HTTPAuthorizationCredentials | None, Depends(api_token_scheme)]


# The dashboard's session cookie (controller/api/web): accepted like a token; CsrfGuard checks
# the state changes made with it.
SessionCookie = Annotated[str | None, Cookie(alias=SESSION_COOKIE, include_in_schema=False)]


def require_api_token(
    controller: ControllerDep,
    credentials: BearerCredentials = None,
    session: SessionCookie = None,
) -> None:
    """Every /v1 route but sandbox events needs a token from SIMPLE_API_TOKENS, if any are set
    (or the dashboard's session cookie, whose state changes CsrfGuard checks)."""
    tokens = controller.settings.api_tokens
    if not tokens:
        return
    token = credentials.credentials.strip() if credentials else ""
    if not token and session_valid(session, tokens):
        return
    if not token:
        raise UnauthorizedError(
            "this API needs a token",
            hint="send `Authorization: Bearer <token>` (simplectl --token or SIMPLE_TOKEN)",
        )
    if not _listed(token, tokens):
        raise UnauthorizedError(
            "invalid API token", hint="use a token listed in the server's SIMPLE_API_TOKENS"
        )


def token_is_valid(token: str | None, controller: Controller) -> bool:
    """For routes that cannot use the dependency (WebSockets): no tokens set, or a listed one."""
    tokens = controller.settings.api_tokens
    return not tokens or (bool(token) and _listed(str(token), tokens))


def _listed(token: str, tokens: list[str]) -> bool:
    """Constant time: every token is compared, on digests of equal length."""
    given = hashlib.sha256(token.encode()).digest()
    matched = False
    for candidate in tokens:
        matched |= hmac.compare_digest(given, hashlib.sha256(candidate.encode()).digest())
    return matched


Authorized = Depends(require_api_token)
