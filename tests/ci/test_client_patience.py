"""The client's patience (issue 31), on fake time: with `patience_s` a controller that is
away is retried for that long (not five times), said on stderr once and then every 30 s,
backing off at most MAX_DELAY_S; giving up is `Unreachable` (exit 5); coming back resumes
the stream with Last-Event-ID and says so."""

from __future__ import annotations

import httpx
import pytest

from controller.cli.client import MAX_DELAY_S, ApiClient, Unreachable


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def patient(handler: object, patience_s: float) -> tuple[ApiClient, FakeTime, list[str]]:
    http = httpx.Client(base_url="http://simple.test", transport=httpx.MockTransport(handler))
    client = ApiClient(http)
    time, said = FakeTime(), list[str]()
    client.patience_s, client.clock, client.sleep = patience_s, time.clock, time.sleep
    client.on_wait = said.append
    return client, time, said


def test_a_controller_away_longer_than_the_patience_is_unreachable() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    client, time, said = patient(refused, 120)
    with pytest.raises(Unreachable, match="gave up after waiting 2m00s") as gone:
        list(client.stream_events("/v1/runs/run-1/stream"))
    assert "simplectl status RUN" in str(gone.value)
    assert time.now - 1000 >= 120
    assert len(time.sleeps) > 5, "more than the five attempts of a plain call"
    assert max(time.sleeps) <= MAX_DELAY_S
    assert said[0].startswith("the controller at http://simple.test does not answer")
    assert "2m00s left (--wait-timeout)" in said[0]
    assert 4 <= len(said) <= 6, "once, then about every 30 s"


def test_a_controller_that_comes_back_is_followed_again() -> None:
    seen: list[str | None] = []
    answers = iter(
        [httpx.Response(200, text='id: 4\nevent: run\ndata: {"n": 1}\n\n')]
        + [httpx.Response(503, text="restarting")] * 20
        + [httpx.Response(200, text='id: 9\nevent: end\ndata: {"n": 2}\n\n')]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("last-event-id"))
        return next(answers)

    client, _, said = patient(handler, 900)
    got = list(client.stream_events("/v1/runs/run-1/stream"))
    assert got == [("run", {"n": 1}), ("end", {"n": 2})]
    assert seen[0] is None and set(seen[1:]) == {"4"}, "resumed where it left off"
    assert said[-1].startswith("the controller answers again after")


def test_without_patience_a_call_gives_up_after_its_attempts() -> None:
    calls: list[httpx.Request] = []

    def refused(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("connection refused")

    client, _, said = patient(refused, 0)
    client.patience_s = None
    with pytest.raises(Unreachable, match="after 5 attempts"):
        client.get("/v1/runs")
    assert len(calls) == 5 and said == []
