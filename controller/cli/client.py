"""HTTP client of the controller API, with retries of what is known to be transient.

By default a call is tried `attempts` times. With `patience_s` (what `run --wait` sets
from `--wait-timeout`) a controller that went away — a restart, a rolling upgrade, a
load balancer's failover — is waited for that long, saying so through `on_wait`, and
the run's stream resumes where it left off (Last-Event-ID). Giving up raises
`Unreachable`: the CLI's exit 5, never the exit that means a sandbox failed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
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


class Unreachable(ApiError):
    """The controller could not be reached (refused, hung up, 502/503/504 …) in time."""


class ApiClient:
    """Calls the API on `http`, an httpx.Client with the server's base URL."""

    def __init__(self, http: httpx.Client, attempts: int = 5, base_delay_s: float = 0.5) -> None:
        self.http, self.attempts, self.base_delay_s = http, attempts, base_delay_s
        self.patience_s: float | None = None  # None: `attempts` tries; else a time window
        self.on_wait: Callable[[str], None] = lambda _message: None
        self.clock: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], None] = time.sleep

    @classmethod
    def remote(cls, server: str, token: str | None) -> ApiClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return cls(httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=TIMEOUT))

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One call; connection errors and 429/5xx-unavailable are retried with backoff."""
        outage = _Outage(self, f"{method} {path}")
        while True:
            try:
                response = self.http.request(method, path, **kwargs)
            except httpx.TransportError as e:
                problem: object = e
            else:
                if response.status_code not in RETRIED_STATUS:
                    outage.over()
                    return _checked(response)
                problem = f"HTTP {response.status_code}"
            outage.failed(problem)

    def _backoff(self, attempt: int) -> None:
        """Capped exponential backoff with full jitter before attempt `attempt + 1`."""
        self.sleep(backoff_s(attempt, self.base_delay_s, MAX_DELAY_S))

    def unreachable(self, failures: int, problem: object, what: str) -> Unreachable:
        origin = _origin(self.http.base_url)
        if self.patience_s is None:
            message = (
                f"cannot reach the SIMPLE server at {origin} after {failures} attempts "
                f"({what}): {_describe(problem)}"
            )
        else:
            message = (
                f"cannot reach the SIMPLE server at {origin}: gave up after waiting "
                f"{_duration(self.patience_s)} (--wait-timeout) for {what}: {_describe(problem)}"
            )
        hint = "check --server / SIMPLE_SERVER and that the server is up"
        if "stream" in what:
            hint += "; `simplectl status RUN` shows the run, which may still be going"
        return Unreachable(message, hint=hint)

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
        is retried with backoff, until `attempts` reconnections in a row brought nothing
        new (or, with `patience_s`, until that long has passed without a message).
        """
        last_id: str | None = None
        outage = _Outage(self, f"the event stream of {path}")
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
                            outage.over()
                            last_id = event_id or last_id
                            yield kind, data
                            if kind == "end":
                                return
            except httpx.TransportError as e:
                problem = e
            outage.failed(problem)


class _Outage:
    """The failures in a row of one call or stream: when to retry, what to say, when to
    give up (raising Unreachable)."""

    SAY_EVERY_S = 30.0

    def __init__(self, client: ApiClient, what: str) -> None:
        self.client, self.what = client, what
        self.failures = 0
        self.since = self.said = 0.0

    def failed(self, problem: object) -> None:
        """Count a failure: back off, or raise Unreachable when it is time to give up."""
        client, now = self.client, self.client.clock()
        self.failures += 1
        if self.failures == 1:
            self.since = now
        if client.patience_s is None:
            out_of_time = self.failures >= client.attempts
        else:
            out_of_time = now - self.since >= client.patience_s
            if self.failures == 1 or now - self.said >= self.SAY_EVERY_S:
                self.said = now
                left = max(client.patience_s - (now - self.since), 0.0)
                client.on_wait(
                    f"the controller at {_origin(client.http.base_url)} does not answer "
                    f"({_describe(problem)}); waiting for it to come back, {_duration(left)} "
                    f"left (--wait-timeout), to resume {self.what}"
                )
        if out_of_time:
            cause = problem if isinstance(problem, Exception) else None
            raise client.unreachable(self.failures, problem, self.what) from cause
        client._backoff(self.failures)

    def over(self) -> None:
        """The server answered: the outage (if any) is over."""
        if self.failures and self.client.patience_s is not None:
            self.client.on_wait(
                f"the controller answers again after {_duration(self.client.clock() - self.since)}"
                f"; resuming {self.what}"
            )
        self.failures = 0


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


def _duration(seconds: float) -> str:
    """12 s, 4m05s, 1h02m."""
    whole = int(seconds + 0.5)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


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
