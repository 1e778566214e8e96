"""Finding 4: `logs?follow=true` exhausted the thread pool.

The follow loop slept inside a worker thread and ignored disconnects: 45 followers
of a quiet sandbox made `/healthz` and `GET /v1/runs` time out, still after the
clients left, until the sandbox ended.
"""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack

import httpx
import pytest

from tests.ci.conftest import Served, ServeFactory
from tests.e2e_helpers import wait_for

FOLLOWERS = 48


def start_quiet(served: Served) -> tuple[str, str]:
    with served.client() as http:
        run_id = http.post("/v1/runs", json={"templates": ["quiet"]}).json()["run_id"]

        def started() -> str | None:
            sandbox = http.get(f"/v1/runs/{run_id}").json()["sandboxes"][0]
            logs = http.get(f"/v1/sandboxes/{sandbox['sandbox_id']}/logs")
            return sandbox["sandbox_id"] if "quiet sandbox" in logs.text else None

        return run_id, wait_for(started, timeout_s=60, what="the quiet sandbox")


def open_followers(served: Served, sandbox_id: str, stack: ExitStack, count: int) -> list[int]:
    """`count` clients following the logs, each holding its stream open; their statuses."""
    statuses: list[int] = []
    for _ in range(count):
        client = stack.enter_context(httpx.Client(base_url=served.url, headers=served.headers,
                                                  timeout=30))
        response = stack.enter_context(
            client.stream("GET", f"/v1/sandboxes/{sandbox_id}/logs", params={"follow": "true"})
        )
        statuses.append(response.status_code)
    return statuses


def quick(served: Served, path: str) -> float:
    started = time.monotonic()
    response = httpx.get(served.url + path, headers=served.headers, timeout=10)
    assert response.status_code == 200, response.text
    return time.monotonic() - started


@pytest.mark.once
def test_many_followers_never_starve_healthz_or_the_api(serve: ServeFactory) -> None:
    served = serve(SIMPLE_LOG_FOLLOWERS_PER_SANDBOX="100", SIMPLE_LOG_FOLLOWERS_TOTAL="100")
    run_id, sandbox_id = start_quiet(served)
    with ExitStack() as stack:
        statuses = open_followers(served, sandbox_id, stack, FOLLOWERS)
        assert statuses == [200] * FOLLOWERS
        time.sleep(2)  # every follower is in its wait now
        assert quick(served, "/healthz") < 5
        assert quick(served, "/v1/runs") < 5
    # The clients left: their followers end, and the API still answers.
    assert quick(served, "/healthz") < 5
    with served.client() as http:
        http.post(f"/v1/runs/{run_id}/cancel")
    assert served.wait_run(run_id, timeout_s=60)["status"] == "cancelled"


def test_followers_are_capped_and_a_disconnect_frees_the_slot(serve: ServeFactory) -> None:
    served = serve(SIMPLE_LOG_FOLLOWERS_PER_SANDBOX="3", SIMPLE_LOG_FOLLOWERS_TOTAL="50")
    run_id, sandbox_id = start_quiet(served)
    with ExitStack() as stack:
        assert open_followers(served, sandbox_id, stack, 3) == [200] * 3
        with served.client() as http:
            refused = http.get(f"/v1/sandboxes/{sandbox_id}/logs", params={"follow": "true"})
        assert refused.status_code == 429
        assert "3 log followers, the cap per sandbox" in refused.json()["error"]["message"]
    # The three clients disconnected: a new follower gets a slot again.

    def follower_accepted() -> bool:
        result: list[int] = []

        def one() -> None:
            with httpx.Client(base_url=served.url, headers=served.headers, timeout=10) as c, \
                    c.stream("GET", f"/v1/sandboxes/{sandbox_id}/logs",
                             params={"follow": "true"}) as response:
                result.append(response.status_code)

        thread = threading.Thread(target=one)
        thread.start()
        thread.join(15)
        return result == [200]

    wait_for(follower_accepted, timeout_s=30, what="a freed follower slot")
    with served.client() as http:
        http.post(f"/v1/runs/{run_id}/cancel")
