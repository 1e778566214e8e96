"""The dashboard's chat panel: the principal (POST /v1/chat) in the browser, at /chat."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from controller.api.web.access import PageViewer
from controller.api.web.render import page

router = APIRouter(include_in_schema=False)


@router.get("/chat", response_class=HTMLResponse)
def chat_page(viewer: PageViewer) -> HTMLResponse:
    """Plan, run and ask in plain words; choices and confirmations are buttons."""
    return page("chat.html", viewer=viewer)
