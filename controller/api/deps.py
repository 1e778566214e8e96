"""Dependencies shared by the routes: the controller, and API-token auth."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, Request

from controller.errors import UnauthorizedError
from controller.service import Controller


def get_controller(request: Request) -> Controller:
    controller: Controller = request.app.state.controller
    return controller


ControllerDep = Annotated[Controller, Depends(get_controller)]


def require_api_token(
    controller: ControllerDep,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> None:
    """Every /v1 route but sandbox events needs a token from SIMPLE_API_TOKENS, if any are set."""
    tokens = controller.settings.api_tokens
    if not tokens:
        return
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise UnauthorizedError(
            "this API needs a token",
            hint="send `Authorization: Bearer <token>` (simplectl --token or SIMPLE_TOKEN)",
        )
    matched = False
    for candidate in tokens:  # compare with every token, so timing says nothing
        matched |= hmac.compare_digest(token.strip().encode(), candidate.encode())
    if not matched:
        raise UnauthorizedError(
            "invalid API token", hint="use a token listed in the server's SIMPLE_API_TOKENS"
        )


Authorized = Depends(require_api_token)
