"""Who may see the dashboard: the login form, the session check for pages and assets,
and the static files (served here, behind the session, not by a public mount)."""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass
from importlib import resources
from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import RedirectResponse

from controller.api.auth import SESSION_COOKIE, token_listed
from controller.api.deps import ControllerDep, LoginThrottleDep, SessionsDep
from controller.api.sessions import SESSION_MAX_AGE_S
from controller.api.web.render import login_page
from controller.api.web.security import SECURITY_HEADERS, csrf_token, safe_next
from controller.errors import (
    NotFoundError,
    PayloadTooLargeError,
    QuotaExceededError,
    UnauthorizedError,
)

router = APIRouter(include_in_schema=False)

LOGIN_BODY_MAX = 4096
_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
STATIC = {
    f.name: (f.read_bytes(), _TYPES[f.name[f.name.rfind(".") :]])
    for f in resources.files("controller.api.web").joinpath("static").iterdir()
    if f.name[f.name.rfind(".") :] in _TYPES
}


class LoginRequired(Exception):
    """A page was asked for without a session: the handler redirects to the login form."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.target = target


@dataclass(frozen=True)
class Viewer:
    """Who is looking: the CSRF token their page's scripts send, and whether login applies."""

    csrf: str
    login: bool


def _viewer(request: Request, controller: ControllerDep, sessions: SessionsDep) -> Viewer | None:
    tokens = controller.settings.api_tokens
    if not tokens:
        return Viewer(csrf="", login=False)
    session = request.cookies.get(SESSION_COOKIE)
    if sessions.live(session):
        return Viewer(csrf=csrf_token(session), login=True)
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer ") and token_listed(auth[7:].strip(), tokens):
        return Viewer(csrf="", login=True)
    return None


def page_viewer(request: Request, controller: ControllerDep, sessions: SessionsDep) -> Viewer:
    """For pages: without a session, go to the login form and come back."""
    viewer = _viewer(request, controller, sessions)
    if viewer is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(target)
    return viewer


def asset_viewer(request: Request, controller: ControllerDep, sessions: SessionsDep) -> Viewer:
    """For assets and streams: without a session, 401."""
    viewer = _viewer(request, controller, sessions)
    if viewer is None:
        raise UnauthorizedError(
            "the dashboard needs a session", hint="log in at /login with an API token"
        )
    return viewer


PageViewer = Annotated[Viewer, Depends(page_viewer)]
AssetViewer = Annotated[Viewer, Depends(asset_viewer)]


def login_redirect(target: str) -> RedirectResponse:
    return RedirectResponse(f"/login?next={quote(target, safe='/')}", status_code=303)


@router.get("/login")
def login_form(request: Request, controller: ControllerDep, next: str = "/") -> Response:
    """The login form (the only page that needs no session)."""
    if not controller.settings.api_tokens:
        return RedirectResponse(safe_next(next), status_code=303)
    return login_page(200, next=safe_next(next), error=None)


@router.post("/login")
async def login(
    request: Request, controller: ControllerDep, sessions: SessionsDep, throttle: LoginThrottleDep
) -> Response:
    """Check the token; start a session whose random value goes in an HttpOnly,
    SameSite=Strict cookie (Secure unless served on loopback). Failures are throttled."""
    client = request.client.host if request.client else "unknown"
    wait_s = throttle.retry_after(client)
    if wait_s > 0:
        raise QuotaExceededError(
            f"too many failed logins from {client}; try again in {wait_s:.0f} s",
            hint="check the token: it is one of the server's SIMPLE_API_TOKENS",
        )
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > LOGIN_BODY_MAX:
            raise PayloadTooLargeError(
                f"the login form is over {LOGIN_BODY_MAX} bytes", hint="send only the token"
            )
    form = parse_qs(body.decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0].strip()
    target = safe_next((form.get("next") or ["/"])[0])
    tokens = controller.settings.api_tokens
    if not tokens:
        return RedirectResponse(target, status_code=303)
    if not token or not token_listed(token, tokens):
        throttle.failed(client)
        return login_page(401, next=target, error="That token is not valid here.")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        await asyncio.to_thread(sessions.create, token),
        max_age=SESSION_MAX_AGE_S,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https" or not served_on_loopback(request),
        path="/",
    )
    return response


def served_on_loopback(request: Request) -> bool:
    """Whether the controller listens on a loopback address (plain http is then fine);
    anywhere else a TLS proxy is expected in front, which uvicorn does not see."""
    server = request.scope.get("server")
    try:
        return server is not None and ipaddress.ip_address(server[0]).is_loopback
    except ValueError:
        return False


@router.post("/logout")
def logout(request: Request, viewer: AssetViewer, sessions: SessionsDep) -> Response:
    """End the session: revoked in the database, so a copy of the cookie opens nothing."""
    sessions.revoke(request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/login" if viewer.login else "/", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.get("/static/{name}")
def static_file(name: str, _viewer: AssetViewer) -> Response:
    """The dashboard's CSS and scripts (behind the session like the pages)."""
    found = STATIC.get(name)
    if found is None:
        raise NotFoundError(f"no static file {name!r}", hint="the dashboard ships its own files")
    content, media_type = found
    headers = {**SECURITY_HEADERS, "Cache-Control": "no-cache"}
    return Response(content, media_type=media_type, headers=headers)
