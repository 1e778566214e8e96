"""GETs of the contract's optional inputs (items, resume checkpoint), bounded and retried.

The URLs authorise themselves (a presigned S3 URL or a signed controller URL), so
no Authorization header is sent. Connection errors, 429 and 5xx are retried with
backoff until the deadline; any other answer, or a body over `max_bytes`, is final.
"""

from __future__ import annotations

import logging

import httpx

from sandbox_image.retry import Backoff, Deadline, retry_after_s

logger = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 30.0


class FetchError(RuntimeError):
    """The URL could not be read before the deadline, was refused, or was too big."""


def fetch_bytes(client: httpx.Client, url: str, what: str, max_bytes: int,
                deadline: Deadline) -> bytes:
    """The body at `url`, at most `max_bytes`; raises FetchError saying why not."""
    backoff = Backoff(base_s=0.5, cap_s=10.0)
    attempt = 0
    while True:
        attempt += 1
        try:
            return _get_once(client, url, what, max_bytes, deadline)
        except _Retryable as e:
            problem, delay = str(e), e.delay or backoff.delay(attempt)
        if delay >= deadline.remaining():
            raise FetchError(f"{what} not fetched after {attempt} attempts: {problem}")
        logger.warning("fetching %s failed (%s); retrying in %.1f s", what, problem, delay)
        deadline.sleep(delay)


class _Retryable(Exception):
    def __init__(self, message: str, delay: float | None = None) -> None:
        super().__init__(message)
        self.delay = delay


def _get_once(client: httpx.Client, url: str, what: str, max_bytes: int,
              deadline: Deadline) -> bytes:
    timeout = max(0.5, min(FETCH_TIMEOUT_S, deadline.remaining()))
    try:
        with client.stream("GET", url, timeout=timeout) as response:
            if response.status_code == 429 or response.status_code >= 500:
                raise _Retryable(f"HTTP {response.status_code}", retry_after_s(response))
            if not response.is_success:
                response.read()
                raise FetchError(f"{what} refused: HTTP {response.status_code}: "
                                 f"{response.text[:300]}")
            body = bytearray()
            for chunk in response.iter_bytes():
                body.extend(chunk)
                if len(body) > max_bytes:
                    raise FetchError(f"{what} is over the {max_bytes}-byte limit")
            return bytes(body)
    except httpx.TransportError as e:
        raise _Retryable(f"{type(e).__name__}: {e}") from e
