"""Who may use the API: API tokens and the dashboard's session, as pure checks.

No FastAPI here: `deps` (the routes' dependencies), `body_guard` (before a body is
read), the metrics route and the dashboard (`api.web`) all ask these same functions.
Every comparison is constant-time, over every configured token.

The dashboard's sessions live in the database (`controller.api.sessions`); callers ask
there whether a cookie is a live session and pass the answer in.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

SESSION_COOKIE = "simple_session"
TOKEN_HINT = "send `Authorization: Bearer <token>` (simplectl --token or SIMPLE_TOKEN)"
LISTED_HINT = "use a token listed in the server's SIMPLE_API_TOKENS"


@dataclass(frozen=True)
class Refusal:
    """Why a caller may not use the API: the message and what to do (answered 401)."""

    message: str
    hint: str


def token_listed(token: str, tokens: list[str]) -> bool:
    """Whether `token` is one of `tokens`. Constant time: every token is compared, on
    digests of equal length (compare_digest returns early on a length mismatch)."""
    given = hashlib.sha256(token.encode()).digest()
    matched = False
    for candidate in tokens:
        matched |= hmac.compare_digest(given, hashlib.sha256(candidate.encode()).digest())
    return matched


def api_refusal(token: str, session_live: bool, tokens: list[str]) -> Refusal | None:
    """Why a caller with this bearer `token` ('' for none), or a dashboard session that is
    `session_live` (`controller.api.sessions`), may not use the API, or None if it may.
    No tokens configured: everyone may (loopback only)."""
    if not tokens:
        return None
    if token:
        return None if token_listed(token, tokens) else Refusal("invalid API token", LISTED_HINT)
    if session_live:
        return None
    return Refusal("this API needs a token", TOKEN_HINT)
