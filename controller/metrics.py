"""Prometheus metrics: what the controller counts as it works, and what it reads at scrape.

Counters and histograms live in one process-wide registry (one controller per
process in production) and are bumped where things happen: sandbox ends and
retries (finisher, reconciler), launches (launcher), events (ingest), backend
calls that failed. Gauges that the database already knows (runs by state, the
total cost) and the ingest queue's depth are read when `/metrics` is scraped, so
they are right after a restart. Names and meanings are listed in
docs/observability.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import SQLAlchemyError

from controller.db.schema import runs, sandboxes
from controller.states import RunStatus

logger = logging.getLogger(__name__)

REGISTRY = CollectorRegistry(auto_describe=True)

SANDBOX_ENDS = Counter(
    "simple_sandbox_ends",
    "Sandboxes that reached a terminal state, by state and backend.",
    ["state", "backend"],
    registry=REGISTRY,
)
SANDBOX_RETRIES = Counter(
    "simple_sandbox_retries",
    "Attempts that ended and were retried, by why the attempt ended.",
    ["reason"],
    registry=REGISTRY,
)
LAUNCH_LATENCY = Histogram(
    "simple_launch_latency_seconds",
    "From an attempt's claim to the backend having started it.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
    registry=REGISTRY,
)
EXIT_TO_RECORDED = Histogram(
    "simple_exit_to_recorded_seconds",
    "From the backend seeing an attempt end to its end being recorded.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
EVENTS_INGESTED = Counter(
    "simple_events_ingested",
    "Sandbox events stored (each (sandbox, id) once; replays are not counted again).",
    registry=REGISTRY,
)
EVENTS_REJECTED = Counter(
    "simple_events_rejected",
    "Event batches answered with an error, by HTTP status code.",
    ["code"],
    registry=REGISTRY,
)
AGGREGATION = Histogram(
    "simple_aggregation_seconds",
    "Fetching, validating and reading one snapshot.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
BACKEND_ERRORS = Counter(
    "simple_backend_errors",
    "Backend calls that failed, by backend and operation.",
    ["backend", "op"],
    registry=REGISTRY,
)
GC_OBJECTS = Counter(
    "simple_gc_objects",
    "Store objects retention removed (logs, item files, resume copies, stage inputs).",
    registry=REGISTRY,
)
GC_BYTES = Counter(
    "simple_gc_bytes", "Bytes of the store objects retention removed.", registry=REGISTRY
)
GC_EVENT_ROWS = Counter(
    "simple_gc_event_rows", "Event rows retention deleted.", registry=REGISTRY
)
LEADER = Gauge(
    "simple_leader",
    "1 while this process leads the reconcilers (always 1 for one process), else 0.",
    registry=REGISTRY,
)
LEASE_TRANSITIONS = Counter(
    "simple_lease_transitions",
    "Changes of this process's leadership: the lease acquired, or lost (stepped down).",
    ["change"],
    registry=REGISTRY,
)


class DatabaseCollector(Collector):
    """Runs by state, the total cost, and the ingest queue's depth, read at scrape time."""

    def __init__(self, engine: Engine, queue_depth: int) -> None:
        self.engine, self.queue_depth = engine, queue_depth

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "simple_ingest_queue_depth", "Event batches waiting for the writer."
        )
        depth.add_metric([], self.queue_depth)
        yield depth
        try:
            with self.engine.connect() as conn:
                counted = conn.execute(select(runs.c.status, func.count()).group_by(runs.c.status))
                by_state: dict[str, int] = {str(state): int(n) for state, n in counted}
                spent = sandboxes.c.cost_usd + sandboxes.c.prior_cost_usd
                cost = conn.execute(select(func.coalesce(func.sum(spent), 0.0))).scalar()
        except SQLAlchemyError as e:  # the page still answers; the gauges are left out
            logger.warning("metrics: cannot read the database: %s", e)
            return
        gauge = GaugeMetricFamily("simple_runs", "Runs by state.", labels=["state"])
        for state in RunStatus:
            gauge.add_metric([state.value], by_state.get(state.value, 0))
        yield gauge
        total = CounterMetricFamily(
            "simple_cost_usd", "Cost sandboxes reported (USD), over every run in the database."
        )
        total.add_metric([], float(cost or 0.0))
        yield total


class PassCollector(Collector):
    """The reconciler's latest passes (up to 10,000): their median and p99, at scrape."""

    def __init__(self, passes: Sequence[float]) -> None:
        self.passes = sorted(passes)

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "simple_reconcile_pass_quantile_seconds",
            "Duration of the reconciler's latest passes (this process, while it leads), "
            "by quantile.", labels=["quantile"])
        if self.passes:
            for q in (0.5, 0.99):
                gauge.add_metric([str(q)], self.passes[min(len(self.passes) - 1,
                                                            int(q * len(self.passes)))])
        yield gauge


def render(engine: Engine, queue_depth: int, passes: Sequence[float] | None = None) -> bytes:
    """The whole metrics page, Prometheus text format; `passes`: the reconciler's latest
    pass durations, when this process has a reconciler."""
    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(DatabaseCollector(engine, queue_depth))
    if passes is not None:
        scrape.register(PassCollector(passes))
    return generate_latest(REGISTRY) + generate_latest(scrape)


def backend_error(backend: Any, op: str) -> None:
    """Count one failed backend call."""
    BACKEND_ERRORS.labels(getattr(backend, "name", type(backend).__name__), op).inc()
