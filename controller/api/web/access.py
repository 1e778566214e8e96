"""Who may see the dashboard: the login form, the session check for pages and assets,
and the static files (served here, behind the session, not by a public mount)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Annotated
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import RedirectResponse

from controller.api.auth import SESSION_COOKIE, session_valid, session_value, token_listed
from controller.api.deps import ControllerDep
from controller.api.web.render import login_page
from controller.api.web.security import (
    SECURITY_HEADERS,
    SESSION_MAX_AGE_S,
    csrf_token,
    safe_next,
)
from controller.errors import NotFoundError, PayloadTooLargeError, UnauthorizedError

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


def _viewer(request: Request, controller: ControllerDep) -> Viewer | None:
    tokens = controller.settings.api_tokens
    if not tokens:
        return Viewer(csrf="", login=False)
    session = request.cookies.get(SESSION_COOKIE)
    if session_valid(session, tokens):
        return Viewer(csrf=csrf_token(session), login=True)
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer ") and token_listed(auth[7:].strip(), tokens):
        return Viewer(csrf="", login=True)
    return None


def page_viewer(request: Request, controller: ControllerDep) -> Viewer:
    """For pages: without a session, go to the login form and come back."""
    viewer = _viewer(request, controller)
    if viewer is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise LoginRequired(target)
    return viewer


def asset_viewer(request: Request, controller: ControllerDep) -> Viewer:
    """For assets and streams: without a session, 401."""
    viewer = _viewer(request, controller)
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
async def login(request: Request, controller: ControllerDep) -> Response:
    """Check the token; keep a digest of it in an HttpOnly, SameSite=Strict cookie."""
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
        return login_page(401, next=target, error="That token is not valid here.")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        session_value(token),
        max_age=SESSION_MAX_AGE_S,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/logout")
def logout(viewer: AssetViewer) -> Response:
    """End the session (the page's script posts it with its CSRF header)."""
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
