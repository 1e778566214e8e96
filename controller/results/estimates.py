"""Estimates that learn: what each ended sandbox really cost and took, and the
ranges the planner uses once a template has been observed often enough.

Every sandbox that ends for good records an observation (actual cost and
runtime next to the estimate it was planned with). With at least
`MIN_OBSERVATIONS` succeeded runs of a template, the planner uses an observed
range instead of the catalog's: a 90 % prediction interval for the next run
(mean ± t·s·√(1 + 1/n), normal model) that is never narrower than the observed
p10-p90. Only the latest `HISTORY` runs per template count, so the range
follows a template that changed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, case, delete, func, insert, select

from controller.catalog.templates import Catalog
from controller.db.schema import observations
from controller.states import SandboxStatus

MIN_OBSERVATIONS = 3
HISTORY = 50
MAX_ROWS_READ = 20_000
CATALOG = "catalog"
# One-sided 95 % quantiles of Student's t by degrees of freedom (two-sided 90 %).
_T95 = {
    1: 6.314,
    2: 2.920,
    3: 2.353,
    4: 2.132,
    5: 2.015,
    6: 1.943,
    7: 1.895,
    8: 1.860,
    9: 1.833,
    10: 1.812,
    12: 1.782,
    15: 1.753,
    20: 1.725,
    30: 1.697,
    60: 1.671,
}


@dataclass(frozen=True)
class ObservedRange:
    """The range the planner uses for a template, and how many runs it rests on."""

    n: int
    cost_usd: tuple[float, float]
    runtime_s: tuple[float, float] | None

    @property
    def source(self) -> str:
        return f"observed (n={self.n})"


_FORGET = delete(observations).where(observations.c.sandbox_id == bindparam("b_id"))
_OBSERVE = insert(observations)


def record_observation(
    conn: Connection, row: Any, status: str, attempt_cost: float, now: datetime
) -> None:
    """Record a sandbox's actual cost and runtime next to its estimate (caller's transaction)."""
    spec = row.spec or {}
    runtime = spec.get("estimate_runtime_s") or [None, None]
    ran = (now - row.launched_at).total_seconds() if row.launched_at else None
    conn.execute(_FORGET, {"b_id": row.id})
    conn.execute(
        _OBSERVE,
        dict(
            sandbox_id=row.id,
            run_id=row.run_id,
            template_id=row.template_id,
            status=str(status),
            cost_usd=round(float(row.prior_cost_usd or 0.0) + attempt_cost, 6),
            runtime_s=None if ran is None else round(max(ran, 0.0), 3),
            estimate_cost_min_usd=spec.get("estimate_min_usd"),
            estimate_cost_max_usd=spec.get("estimate_max_usd"),
            estimate_runtime_min_s=runtime[0],
            estimate_runtime_max_s=runtime[1],
            finished_at=now,
        )
    )


def t_quantile(df: int) -> float:
    """Student's t, one-sided 95 %, for `df` degrees of freedom (table, then normal)."""
    if df > max(_T95):
        return 1.645
    # The nearest tabulated df below: a slightly wider interval, never a narrower one.
    return _T95[max([d for d in _T95 if d <= df] or [1])]


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (0 <= q <= 1) of non-empty `values`."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def prediction_range(values: Sequence[float]) -> tuple[float, float]:
    """Where the next value should fall: a 90 % prediction interval, at least p10-p90."""
    n = len(values)
    mean = statistics.fmean(values)
    spread = statistics.stdev(values) if n > 1 else 0.0
    half = t_quantile(n - 1) * spread * math.sqrt(1 + 1 / n)
    low = min(mean - half, percentile(values, 0.1))
    high = max(mean + half, percentile(values, 0.9))
    return round(max(low, 0.0), 6), round(high, 6)


def observed_ranges(engine: Engine) -> dict[str, ObservedRange]:
    """Per template with enough succeeded runs, the range its next run should fall in."""
    query = (
        select(observations.c.template_id, observations.c.cost_usd, observations.c.runtime_s)
        .where(observations.c.status == SandboxStatus.SUCCEEDED)
        .order_by(observations.c.finished_at.desc())
        .limit(MAX_ROWS_READ)
    )
    costs: dict[str, list[float]] = {}
    runtimes: dict[str, list[float]] = {}
    with engine.connect() as conn:
        for template_id, cost, runtime in conn.execute(query):
            kept = costs.setdefault(template_id, [])
            if len(kept) < HISTORY:
                kept.append(float(cost))
                if runtime is not None:
                    runtimes.setdefault(template_id, []).append(float(runtime))
    return {
        template_id: ObservedRange(
            n=len(values),
            cost_usd=prediction_range(values),
            runtime_s=(
                prediction_range(runtimes[template_id])
                if len(runtimes.get(template_id, [])) >= MIN_OBSERVATIONS
                else None
            ),
        )
        for template_id, values in costs.items()
        if len(values) >= MIN_OBSERVATIONS
    }


def learned_catalog(
    catalog: Catalog, ranges: Mapping[str, ObservedRange]
) -> tuple[Catalog, dict[str, str]]:
    """The catalog with observed ranges in place of estimates, and each template's source."""
    templates = dict(catalog.templates)
    sources = {}
    for template_id, template in catalog.templates.items():
        observed = ranges.get(template_id)
        if observed is None:
            sources[template_id] = CATALOG
            continue
        templates[template_id] = replace(
            template,
            cost_usd=observed.cost_usd,
            runtime_s=observed.runtime_s or template.runtime_s,
        )
        sources[template_id] = observed.source
    return replace(catalog, templates=templates), sources


def planning_catalog(engine: Engine, catalog: Catalog) -> tuple[Catalog, dict[str, str]]:
    """What the planner plans with: the catalog, taught by what was observed."""
    return learned_catalog(catalog, observed_ranges(engine))


def accuracy(engine: Engine, catalog: Catalog) -> list[dict[str, Any]]:
    """Per observed template: the estimate against what its runs really cost and took."""
    o = observations.c
    within = case(
        ((o.cost_usd >= o.estimate_cost_min_usd) & (o.cost_usd <= o.estimate_cost_max_usd), 1),
        else_=0,
    )
    query = (
        select(
            o.template_id,
            func.count(),
            func.sum(case((o.status == SandboxStatus.SUCCEEDED, 1), else_=0)),
            func.avg(o.cost_usd),
            func.min(o.cost_usd),
            func.max(o.cost_usd),
            func.avg(o.runtime_s),
            func.sum(within),
            func.min(o.estimate_cost_min_usd),
            func.max(o.estimate_cost_max_usd),
        )
        .group_by(o.template_id)
        .order_by(o.template_id)
    )
    with engine.connect() as conn:
        grouped = conn.execute(query).all()
    ranges = observed_ranges(engine)
    rows = []
    for template_id, n, succeeded, mean, low, high, runtime, inside, e_low, e_high in grouped:
        template = catalog.templates.get(template_id)
        recorded = [e_low, e_high] if e_low is not None and e_high is not None else None
        estimate = list(template.cost_usd) if template else recorded
        middle = sum(estimate) / 2 if estimate else None
        observed = ranges.get(template_id)
        rows.append(
            {
                "template_id": template_id,
                "runs": int(n),
                "succeeded": int(succeeded or 0),
                "estimate_cost_usd": estimate,
                "estimate_runtime_s": list(template.runtime_s) if template else None,
                "actual_cost_usd": {
                    "mean": round(float(mean), 6),
                    "min": round(float(low), 6),
                    "max": round(float(high), 6),
                },
                "actual_runtime_s_mean": None if runtime is None else round(float(runtime), 3),
                "within_estimate_pct": round(100 * float(inside or 0) / int(n), 1),
                "error_pct": (round(100 * (float(mean) - middle) / middle, 1) if middle else None),
                "observed_cost_usd": list(observed.cost_usd) if observed else None,
                "estimate_source": observed.source if observed else CATALOG,
            }
        )
    return rows
