"""HTTP client of the controller API, with retries of what is known to be transient."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

from controller.retry import backoff_s

RETRIED_STATUS = frozenset({429, 502, 503, 504})
TIMEOUT = httpx.Timeout(30.0, connect=5.0)
STREAM_TIMEOUT = httpx.Timeout(60.0, connect=5.0)  # the server sends keep-alives every 15 s
MAX_DELAY_S = 10.0


class ApiError(Exception):
    """The server answered with an error, or could not be reached."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        code: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.code, self.hint = message, status, code, hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class ApiClient:
    """Calls the API on `http`, an httpx.Client with the server's base URL."""

    def __init__(self, http: httpx.Client, attempts: int = 5, base_delay_s: float = 0.5) -> None:
        self.http, self.attempts, self.base_delay_s = http, attempts, base_delay_s

    @classmethod
    def remote(cls, server: str, token: str | None) -> ApiClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return cls(httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=TIMEOUT))

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call; connection errors and 429/5xx-unavailable are retried with backoff."""
        last: Exception | None = None
        for attempt in range(1, self.attempts + 1):
            try:
                response = self.http.request(method, path, **kwargs)
            except httpx.TransportError as e:
                last = e
            else:
                if response.status_code not in RETRIED_STATUS or attempt == self.attempts:
                    return _checked(response)
                last = ApiError(
                    f"{method} {path}: HTTP {response.status_code}", response.status_code
                )
            if attempt < self.attempts:
                self._backoff(attempt)
        raise ApiError(
            f"cannot reach the SIMPLE server at {_origin(self.http.base_url)} after "
            f"{self.attempts} attempts: {_describe(last)}",
            hint="check --server / SIMPLE_SERVER and that the server is up",
        ) from last

    def _backoff(self, attempt: int) -> None:
        """Capped exponential backoff with full jitter before attempt `attempt + 1`."""
        time.sleep(backoff_s(attempt, self.base_delay_s, MAX_DELAY_S))

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs).json()

    def text(self, path: str, **kwargs: Any) -> str:
        return self.request("GET", path, **kwargs).text

    def stream_lines(self, path: str, params: dict[str, Any]) -> Iterator[bytes]:
        with self.http.stream("GET", path, params=params, timeout=None) as response:
            if response.status_code >= 400:
                response.read()
                _checked(response)
            yield from response.iter_bytes()

    def stream_events(self, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """Server-sent events as (kind, data) until `end`; reconnects with Last-Event-ID.

        A dropped connection, a stream that closes before `end`, or a 429/502/503/504
        is retried with backoff; after `attempts` reconnections in a row that brought
        nothing new, it gives up.
        """
        last_id: str | None = None
        failures = 0
        while True:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            problem: object = "the stream closed before its end"
            try:
                with self.http.stream("GET", path, headers=headers, timeout=STREAM_TIMEOUT) as r:
                    if r.status_code >= 400:
                        r.read()
                        if r.status_code not in RETRIED_STATUS:
                            _checked(r)
                        problem = f"HTTP {r.status_code}"
                    else:
                        for kind, event_id, data in _parse_sse(r.iter_lines()):
                            failures = 0
                            last_id = event_id or last_id
                            yield kind, data
                            if kind == "end":
                                return
            except httpx.TransportError as e:
                problem = e
            failures += 1
            if failures >= self.attempts:
                raise ApiError(
                    f"lost the event stream of {path} after {failures} attempts: "
                    f"{_describe(problem)}",
                    hint="check the server; `simplectl status RUN` shows the run",
                ) from (problem if isinstance(problem, Exception) else None)
            self._backoff(failures)


def _parse_sse(lines: Iterator[str]) -> Iterator[tuple[str, str | None, dict[str, Any]]]:
    kind, event_id, data = "message", None, list[str]()
    for line in lines:
        if not line:
            if data:
                yield kind, event_id, json.loads("\n".join(data))
            kind, data = "message", []
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            kind = value
        elif field == "id":
            event_id = value
        elif field == "data":
            data.append(value)


def _origin(url: httpx.URL) -> str:
    return str(url).rstrip("/")


def _describe(problem: object) -> str:
    """A transport error as people read it (some httpx errors have an empty str)."""
    text = str(problem)
    return text if text else type(problem).__name__


def _checked(response: httpx.Response) -> httpx.Response:
    if response.status_code < 400:
        return response
    try:
        error = response.json().get("error", {})
    except ValueError:
        error = {}
    raise ApiError(
        error.get("message") or f"HTTP {response.status_code}: {response.text[:200]}",
        response.status_code,
        error.get("code"),
        error.get("hint"),
    )
