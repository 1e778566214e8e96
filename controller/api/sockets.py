"""Limits of WebSockets, before and after a token: frame sizes and the sockets that wait.

uvicorn buffers a whole frame before any route sees it (16 MiB by default, 32 queued),
so the limit has to be the listener's: every uvicorn we start gets WS_MAX_BYTES and
WS_MAX_QUEUE (`controller.cli.embedded`).
A socket without credentials in its handshake is accepted only to read its token
message, and only UNAUTHENTICATED_SOCKETS_MAX of those at a time.
"""

from __future__ import annotations

WS_MAX_BYTES = 16 * 1024  # a frame past this closes the socket (1009) before more is read
WS_MAX_QUEUE = 4  # frames uvicorn queues per socket before it stops reading
UNAUTHENTICATED_SOCKETS_MAX = 8


class SocketSlots:
    """How many accepted sockets still wait for their token message (one event loop)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.count = limit, 0

    def take(self) -> bool:
        """A slot, or False when all are taken (the caller refuses the socket)."""
        if self.count >= self.limit:
            return False
        self.count += 1
        return True

    def give_back(self) -> None:
        self.count -= 1
