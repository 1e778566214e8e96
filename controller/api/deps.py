"""The only way routes get objects: the controller, the parts of it they use, the app's
own parts, and API-token auth, as `Annotated` dependency aliases.

`attach` puts a controller and the app's parts on the app once, at `create_app`; only
the getters here read them back. Everything that belongs to the controller (its
signer, its event intake) is the controller's own, never the app's or a module's.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Cookie, Depends, FastAPI
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import HTTPConnection

from controller.api.auth import SESSION_COOKIE, api_refusal, token_listed
from controller.api.body_guard import ATTEMPT_KEY
from controller.api.log_follow import FollowerSlots
from controller.api.sessions import LoginThrottle, Sessions
from controller.api.sockets import UNAUTHENTICATED_SOCKETS_MAX, SocketSlots
from controller.api.transfers import TransferSlots
from controller.errors import UnauthorizedError
from controller.intake.event_intake import EventIntake
from controller.intake.tokens import Signer
from controller.principal.conversation import Principal
from controller.service import Controller


def attach(app: FastAPI, controller: Controller, principal: Principal) -> None:
    """Serve `controller` (and `principal`) with `app`; the app's own log-follower caps."""
    settings = controller.settings
    app.state.controller = controller
    app.state.principal = principal
    app.state.log_followers = FollowerSlots(
        settings.log_followers_per_sandbox, settings.log_followers_total
    )
    app.state.unauthenticated_sockets = SocketSlots(UNAUTHENTICATED_SOCKETS_MAX)
    app.state.sessions = Sessions(lambda: controller.engine, lambda: settings.api_tokens)
    app.state.login_throttle = LoginThrottle()
    app.state.transfers = TransferSlots()


def get_controller(connection: HTTPConnection) -> Controller:
    controller: Controller = connection.app.state.controller
    return controller


ControllerDep = Annotated[Controller, Depends(get_controller)]


def get_principal(connection: HTTPConnection) -> Principal:
    principal: Principal = connection.app.state.principal
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def get_sessions(connection: HTTPConnection) -> Sessions:
    found: Sessions = connection.app.state.sessions
    return found


SessionsDep = Annotated[Sessions, Depends(get_sessions)]


def get_login_throttle(connection: HTTPConnection) -> LoginThrottle:
    throttle: LoginThrottle = connection.app.state.login_throttle
    return throttle


LoginThrottleDep = Annotated[LoginThrottle, Depends(get_login_throttle)]


def get_follower_slots(connection: HTTPConnection) -> FollowerSlots:
    slots: FollowerSlots = connection.app.state.log_followers
    return slots


FollowerSlotsDep = Annotated[FollowerSlots, Depends(get_follower_slots)]


def get_transfer_slots(connection: HTTPConnection) -> TransferSlots:
    slots: TransferSlots = connection.app.state.transfers
    return slots


TransferSlotsDep = Annotated[TransferSlots, Depends(get_transfer_slots)]


def get_signer(controller: ControllerDep) -> Signer:
    return controller.signer


SignerDep = Annotated[Signer, Depends(get_signer)]


def get_event_intake(controller: ControllerDep) -> EventIntake:
    return controller.event_intake


EventIntakeDep = Annotated[EventIntake, Depends(get_event_intake)]


def get_token_attempt(connection: HTTPConnection) -> int | None:
    """The attempt whose sandbox token the request carries, as BodyGuard found it (None:
    none found, or not a sandbox's events request)."""
    attempt: int | None = getattr(connection.state, ATTEMPT_KEY, None)
    return attempt


TokenAttempt = Annotated[int | None, Depends(get_token_attempt)]

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
    sessions: SessionsDep,
    credentials: BearerCredentials = None,
    session: SessionCookie = None,
) -> None:
    """Every /v1 route but sandbox events needs a token from SIMPLE_API_TOKENS, if any are set
    (or a live dashboard session, whose state changes CsrfGuard checks)."""
    tokens = controller.settings.api_tokens
    token = credentials.credentials.strip() if credentials else ""
    live = bool(tokens) and not token and sessions.live(session)
    refusal = api_refusal(token, live, tokens)
    if refusal is not None:
        raise UnauthorizedError(refusal.message, hint=refusal.hint)


def token_is_valid(token: str | None, controller: Controller) -> bool:
    """For routes that cannot use the dependency (WebSockets): no tokens set, or a listed one."""
    tokens = controller.settings.api_tokens
    return not tokens or (bool(token) and token_listed(str(token), tokens))


Authorized = Depends(require_api_token)
