"""GET /metrics on a served controller: the quick suite counted, the page parses, tokens."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.ci.conftest import ServeFactory

METRICS_TOKEN = "metrics-0123456789abcdef"
NAMED = (
    "simple_runs", "simple_sandbox_ends", "simple_sandbox_retries",
    "simple_launch_latency_seconds", "simple_exit_to_recorded_seconds",
    "simple_events_ingested", "simple_events_rejected", "simple_ingest_queue_depth",
    "simple_aggregation_seconds", "simple_backend_errors", "simple_cost_usd",
)


def samples(page: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the page, by name and labels; prometheus_client's parser reads it."""
    found = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_after_the_quick_suite(serve: ServeFactory) -> None:
    served = serve(SIMPLE_METRICS_TOKEN=METRICS_TOKEN)
    result = served.simplectl(*served.remote("run", "quick", "--json"), timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr

    response = httpx.get(f"{served.url}/metrics",
                         headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    page = response.text
    values = samples(page)
    families = {f.name for f in text_string_to_metric_families(page)}
    assert set(NAMED) <= families, f"missing: {set(NAMED) - families}"

    assert values[("simple_sandbox_ends_total",
                   (("backend", "process"), ("state", "succeeded")))] == 7
    assert values[("simple_launch_latency_seconds_count", ())] == 7
    assert values[("simple_launch_latency_seconds_sum", ())] > 0
    assert values[("simple_exit_to_recorded_seconds_count", ())] == 7
    assert values[("simple_aggregation_seconds_count", ())] == 7
    assert values[("simple_runs", (("state", "succeeded"),))] == 1
    assert values[("simple_runs", (("state", "running"),))] == 0
    assert values[("simple_events_ingested_total", ())] >= 7 * 3, "started, steps, completed"
    assert values[("simple_cost_usd_total", ())] > 0
    assert values[("simple_ingest_queue_depth", ())] == 0


def test_metrics_take_an_api_token_or_the_metrics_token(serve: ServeFactory) -> None:
    served = serve(SIMPLE_METRICS_TOKEN=METRICS_TOKEN)
    url = f"{served.url}/metrics"
    for token in (METRICS_TOKEN, served.token):
        assert httpx.get(url, headers={"Authorization": f"Bearer {token}"},
                         timeout=30).status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}):
        response = httpx.get(url, headers=headers, timeout=30)
        assert response.status_code == 401, response.text
        assert "SIMPLE_METRICS_TOKEN" in response.json()["error"]["hint"]
    # The metrics token opens /metrics only.
    other = httpx.get(f"{served.url}/v1/runs",
                      headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30)
    assert other.status_code == 401
    assert METRICS_TOKEN not in served.log()
