"""The dashboard's sessions: random values kept server-side, and failed logins throttled.

A login makes a session: the cookie holds 32 random bytes (URL-safe), the database only
their SHA-256, with the digest of the token that logged in, an expiry
(SESSION_MAX_AGE_S) and, after logout, the time it was revoked. A session is live while
it is neither expired nor revoked and its token is still in SIMPLE_API_TOKENS, so a
cookie copied before a logout, or computed offline, opens nothing.

Failed logins are counted per client address: LOGIN_FAILURES_MAX in LOGIN_WINDOW_S, then
429 until the window has passed, so tokens cannot be guessed at the network's speed.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, delete, insert, select, update

from controller.db.schema import sessions

SESSION_MAX_AGE_S = 7 * 24 * 3600
LOGIN_FAILURES_MAX = 5
LOGIN_WINDOW_S = 60.0
CLIENTS_TRACKED = 10_000


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class Sessions:
    """Create, check and revoke dashboard sessions in the controller's database."""

    def __init__(
        self,
        engine: Callable[[], Engine],
        tokens: Callable[[], list[str]],
        max_age_s: float = SESSION_MAX_AGE_S,
    ) -> None:
        self.engine, self.tokens, self.max_age_s = engine, tokens, max_age_s

    def create(self, token: str) -> str:
        """A new session for a (checked) token; the cookie's value. Prunes expired ones."""
        value = secrets.token_urlsafe(32)
        now = datetime.now(UTC)
        with self.engine().begin() as conn:
            conn.execute(delete(sessions).where(sessions.c.expires_at < now))
            conn.execute(
                insert(sessions).values(
                    id=_digest(value),
                    token_sha256=_digest(token),
                    created_at=now,
                    expires_at=now + timedelta(seconds=self.max_age_s),
                )
            )
        return value

    def live(self, value: str | None) -> bool:
        """Whether a cookie's value is a live session (see the module's docstring)."""
        tokens = self.tokens()
        if not value or not tokens or len(value) > 256:
            return False
        with self.engine().connect() as conn:
            row = conn.execute(
                select(sessions.c.token_sha256, sessions.c.expires_at, sessions.c.revoked_at)
                .where(sessions.c.id == _digest(value))
            ).first()
        if row is None or row.revoked_at is not None or row.expires_at <= datetime.now(UTC):
            return False
        return any(secrets.compare_digest(row.token_sha256, _digest(t)) for t in tokens)

    def revoke(self, value: str | None) -> None:
        """End a session at logout: its cookie, replayed, is refused from now on."""
        if not value:
            return
        with self.engine().begin() as conn:
            conn.execute(
                update(sessions)
                .where(sessions.c.id == _digest(value), sessions.c.revoked_at.is_(None))
                .values(revoked_at=datetime.now(UTC))
            )


class LoginThrottle:
    """Failed logins per client address, in a sliding window (in memory, bounded)."""

    def __init__(
        self, limit: int = LOGIN_FAILURES_MAX, window_s: float = LOGIN_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self._failures: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def retry_after(self, client: str) -> float:
        """Seconds until `client` may try again (0: now)."""
        with self._lock:
            recent = self._recent(client)
            if len(recent) < self.limit:
                return 0.0
            return max(0.0, recent[0] + self.window_s - self.clock())

    def failed(self, client: str) -> None:
        with self._lock:
            self._failures[client] = [*self._recent(client), self.clock()]
            self._failures.move_to_end(client)
            while len(self._failures) > CLIENTS_TRACKED:
                self._failures.popitem(last=False)

    def _recent(self, client: str) -> list[float]:
        now = self.clock()
        return [t for t in self._failures.get(client, []) if now - t < self.window_s]
