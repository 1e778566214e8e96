"""The Jinja2 environment (autoescaping everything) and HTML responses with the
dashboard's security headers."""

from __future__ import annotations

import secrets
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from controller import __version__
from controller.api.web import views
from controller.api.web.security import CSP, SECURITY_HEADERS

env = Environment(
    loader=PackageLoader("controller.api.web", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
env.filters.update(
    money=views.format_money,
    number=views.format_number,
    duration=views.format_duration,
    utc=views.format_time,
)
env.globals.update(version=__version__, message=views.event_message, policy=views.policy_text)


def page(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render templates/NAME; every page gets the CSP and no caching."""
    html = env.get_template(name).render(**context)
    response = HTMLResponse(html, status_code=status_code)
    response.headers.update(SECURITY_HEADERS)
    response.headers["Cache-Control"] = "no-store"
    return response


def login_page(status_code: int, **context: Any) -> HTMLResponse:
    """The login form: the one page readable without a session, so its style is inline
    (allowed by a nonce), not an asset that would need the session."""
    nonce = secrets.token_urlsafe(16)
    response = page("login.html", status_code=status_code, nonce=nonce, **context)
    response.headers["Content-Security-Policy"] = CSP.replace(
        "style-src 'self'", f"style-src 'nonce-{nonce}'"
    )
    return response
