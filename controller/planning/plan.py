"""The planner: catalog + request -> plan. Pure: data in, data out, no I/O.

Priorities follow the seed's cost optimiser:
- `speed`: everything at once (up to 64), longest first so the makespan is short;
- `cost`: cheapest first in small batches (2 at a time), so a budget stop
  hits the expensive ones;
- `balanced`: cheap templates (max estimate under $10) first and in parallel,
  expensive ones one at a time.
With a budget, templates are kept cheapest first (by max estimate) while the
sum of their max estimates stays within it, so the budget holds as many as it
can; the rest are excluded with the reason. The kept ones keep the priority's order.

A free-text `query` is read by the principal's grammar (`controller.language.grammar`)
into the same fields; the plan then carries its `interpretation`. A query that is
ambiguous or names nothing is refused with the choices, never guessed at.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from controller.catalog.batches import WorkItem, check_batch_size, split
from controller.catalog.stages import Stage
from controller.catalog.templates import Catalog, Template
from controller.errors import AmbiguousRequestError, InputError, UnknownNameError
from controller.language.grammar import Reading, read_request

MAX_WORKERS = 64
COST_PRIORITY_PARALLEL = 2
EXPENSIVE_USD = 10.0


class Priority(StrEnum):
    SPEED = "speed"
    COST = "cost"
    BALANCED = "balanced"


@dataclass(frozen=True)
class PlanRequest:
    """What the user asked for."""

    names: tuple[str, ...] = ()  # each a suite or a template id (a suite wins)
    suites: tuple[str, ...] = ()
    templates: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    query: str | None = None
    budget_usd: float | None = None
    priority: Priority = Priority.BALANCED
    max_parallel: int | None = None
    items: tuple[WorkItem, ...] | None = None  # ad-hoc items for the one template named
    batch_size: int | None = None
    stages: tuple[Stage, ...] = ()  # a staged request; else a staged suite named alone
    exclude: tuple[str, ...] = ()  # template ids left out on request ("but not portal-test")
    max_runtime_s: float | None = None  # templates that may run longer are left out


@dataclass(frozen=True)
class Exclusion:
    template_id: str
    reason: str


@dataclass(frozen=True)
class Plan:
    """The pure result of planning."""

    selected: tuple[str, ...]
    excluded: tuple[Exclusion, ...]
    estimated_cost_usd: tuple[float, float]
    estimated_runtime_s: tuple[float, float]
    max_parallel: int
    max_parallel_expensive: int | None
    priority: Priority
    budget_usd: float | None
    expensive: tuple[str, ...] = field(default=())
    batches: tuple[BatchPlan, ...] = field(default=())
    max_runtime_s: float | None = None
    interpretation: dict[str, Any] | None = field(default=None, compare=False)
    stages: tuple[dict[str, Any], ...] = ()  # staged runs: each stage with its estimates
    critical_path: tuple[str, ...] = ()  # the template that ends last, stage by stage
    estimates: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stages": list(self.stages),
            "critical_path": list(self.critical_path),
            "estimates": self.estimates,
            "batches": [b.to_dict() for b in self.batches],
            "selected": list(self.selected),
            "excluded": [{"template_id": e.template_id, "reason": e.reason} for e in self.excluded],
            "estimated_cost_usd": list(self.estimated_cost_usd),
            "estimated_runtime_s": list(self.estimated_runtime_s),
            "max_parallel": self.max_parallel,
            "max_parallel_expensive": self.max_parallel_expensive,
            "expensive": list(self.expensive),
            "priority": self.priority.value,
            "budget_usd": self.budget_usd,
            "max_runtime_s": self.max_runtime_s,
            "interpretation": self.interpretation,
        }


@dataclass(frozen=True)
class BatchPlan:
    """How a batch template's items split into sandboxes."""

    template_id: str
    batch_size: int
    sizes: tuple[int, ...]  # items per sandbox, in launch order

    def to_dict(self) -> dict[str, Any]:
        return {"template_id": self.template_id, "items": sum(self.sizes),
                "batch_size": self.batch_size, "sandboxes": len(self.sizes),
                "items_per_sandbox": [min(self.sizes), max(self.sizes)]}


def with_items(catalog: Catalog, request: PlanRequest, template_id: str) -> Template:
    """The template with the request's ad-hoc items and batch size applied."""
    template = catalog.templates[template_id]
    items = template.items if request.items is None else request.items
    if not items:
        return template
    return replace(template, items=items,
                   batch_size=check_batch_size(request.batch_size or template.batch_size))


def item_batches(template: Template) -> list[tuple[WorkItem, ...]]:
    """The template's items split into sandboxes; [] for a template without items."""
    return split(template.items, check_batch_size(template.batch_size))


def _batch_plans(templates: list[Template]) -> tuple[BatchPlan, ...]:
    return tuple(
        BatchPlan(t.id, check_batch_size(t.batch_size), tuple(len(b) for b in item_batches(t)))
        for t in templates if t.items)


def _per_sandbox(templates: list[Template], index: int) -> list[float]:
    """Runtime estimates per sandbox, launch order; a batch's scale with its items."""
    return [t.runtime_s[index] * (len(batch) if t.items else 1)
            for t in templates for batch in (item_batches(t) if t.items else [()])]


def _scaled(template: Template) -> Template:
    """A batch template's estimates are per item: the whole template's scale with them."""
    if not template.items:
        return template
    n = len(template.items)
    return replace(template, cost_usd=(template.cost_usd[0] * n, template.cost_usd[1] * n))


def _check_items_request(wanted: list[str], request: PlanRequest) -> None:
    if request.items is not None and len(wanted) != 1:
        raise InputError(f"items were given for {len(wanted)} templates; name exactly one",
                         hint="e.g. `simplectl run TEMPLATE --items FILE`", field="items")


def plan(
    catalog: Catalog, request: PlanRequest, sources: Mapping[str, str] | None = None
) -> Plan:
    """Select, order and size a run from the catalog; a staged one stage by stage.

    `sources` says, per template, where its estimate comes from (`catalog`, or
    `observed (n=…)` when `catalog` carries ranges learnt from earlier runs).
    """
    from controller.planning.staged import estimates, plan_staged, requested_stages

    request, reading = _apply_query(catalog, request)
    stages = requested_stages(catalog, request)
    result = plan_staged(catalog, request, stages) if stages else _plan_flat(catalog, request)
    result = replace(result, interpretation=reading.interpretation() if reading else None)
    return replace(result, estimates=estimates(catalog, result.selected, sources or {}))


def _plan_flat(catalog: Catalog, request: PlanRequest) -> Plan:
    wanted, asked_out = _without_exclusions(_select(catalog, request), request, catalog)
    _check_items_request(wanted, request)
    templates = [_scaled(with_items(catalog, request, t)) for t in wanted]
    ordered = _order(templates, request.priority)
    ordered, too_long = _fit_runtime(ordered, request.max_runtime_s)
    selected, excluded = _fit_budget(ordered, request.budget_usd)
    excluded = [*asked_out, *too_long, *excluded]
    max_parallel, max_expensive = _parallelism(selected, request)
    return Plan(
        selected=tuple(t.id for t in selected),
        excluded=tuple(excluded),
        estimated_cost_usd=(
            round(sum(t.cost_usd[0] for t in selected), 2),
            round(sum(t.cost_usd[1] for t in selected), 2),
        ),
        estimated_runtime_s=(
            _makespan(_per_sandbox(selected, 0), max_parallel),
            _makespan(_per_sandbox(selected, 1), max_parallel),
        ),
        batches=_batch_plans(selected),
        max_parallel=max_parallel,
        max_parallel_expensive=max_expensive,
        priority=request.priority,
        budget_usd=request.budget_usd,
        expensive=tuple(t.id for t in selected if _is_expensive(t)),
        max_runtime_s=request.max_runtime_s,
        critical_path=critical_path(selected),
    )


def critical_path(templates: list[Template]) -> tuple[str, ...]:
    """The template that ends last (longest max runtime): what the run waits for."""
    return (max(templates, key=lambda t: t.runtime_s[1]).id,) if templates else ()


def _without_exclusions(
    wanted: list[str], request: PlanRequest, catalog: Catalog
) -> tuple[list[str], list[Exclusion]]:
    unknown = [t for t in request.exclude if t not in catalog.templates]
    if unknown:
        raise UnknownNameError(
            f"cannot exclude unknown templates: {', '.join(unknown[:5])}",
            hint="list them with `simplectl templates`",
            field="exclude",
        )
    left_out = set(request.exclude)
    kept = [t for t in wanted if t not in left_out]
    if wanted and not kept:
        raise InputError(
            "nothing to run: the exclusions leave out every template named",
            hint="exclude fewer templates, or name more",
            field="query",
        )
    return kept, [Exclusion(t, "excluded by the request") for t in wanted if t in left_out]


def _fit_runtime(
    ordered: list[Template], limit_s: float | None
) -> tuple[list[Template], list[Exclusion]]:
    if limit_s is None:
        return ordered, []
    if limit_s <= 0:
        raise InputError("max_runtime_s must be positive", field="max_runtime_s")
    kept = [t for t in ordered if t.runtime_s[1] <= limit_s]
    return kept, [
        Exclusion(
            t.id,
            f"over the runtime limit: it may run {t.runtime_s[1]:g} s, above the "
            f"{limit_s:g} s limit",
        )
        for t in ordered
        if t.runtime_s[1] > limit_s
    ]


def _select(catalog: Catalog, request: PlanRequest) -> list[str]:
    wanted: dict[str, None] = {}
    for name in request.names:
        if name in catalog.suites:
            wanted.update(dict.fromkeys(catalog.suites[name]))
        elif name in catalog.templates:
            wanted[name] = None
        else:
            raise UnknownNameError(
                f"unknown template or suite {name!r}",
                hint="list them with `simplectl templates`",
                field="names",
            )
    for name in request.suites:
        wanted.update(dict.fromkeys(catalog.suite(name)))
    for name in request.categories:
        members = [t.id for t in catalog.templates.values() if t.category == name]
        if not members:
            raise InputError(
                f"unknown category {name!r}",
                hint=f"known categories: {', '.join(sorted(catalog.categories()))}",
                field="categories",
            )
        wanted.update(dict.fromkeys(members))
    for name in request.templates:
        wanted[catalog.template(name).id] = None
    if not wanted:
        raise InputError(
            "nothing to run: name at least one suite, template or category",
            hint="e.g. `simplectl run quick`; list them with `simplectl templates`",
            field="suites",
        )
    return list(wanted)


def longest_first(templates: list[Template]) -> list[Template]:
    """Longest-processing-time first: by the runtime estimate's max, then its min.

    Launched in this order into P slots (each slot takes the next when it frees),
    the makespan stays within 4/3 of the optimum and, with many templates, near the
    lower bound max(longest, total / P). Stable: equal estimates keep their order.
    """
    return sorted(templates, key=lambda t: (-t.runtime_s[1], -t.runtime_s[0]))


def _order(templates: list[Template], priority: Priority) -> list[Template]:
    if priority is Priority.SPEED:
        return longest_first(templates)
    if priority is Priority.COST:
        return sorted(templates, key=lambda t: t.cost_usd[0])
    cheap = sorted((t for t in templates if not _is_expensive(t)), key=lambda t: t.cost_usd[0])
    expensive = sorted((t for t in templates if _is_expensive(t)), key=lambda t: t.cost_usd[0])
    return cheap + expensive


def _fit_budget(
    ordered: list[Template], budget: float | None
) -> tuple[list[Template], list[Exclusion]]:
    if budget is None:
        return ordered, []
    if budget <= 0:
        raise InputError("budget_usd must be positive", field="budget_usd")
    kept: set[str] = set()
    excluded: list[Exclusion] = []
    total = 0.0
    # Cheapest (max estimate) first: as many templates as the budget holds.
    for template in sorted(ordered, key=lambda t: t.cost_usd[1]):
        high = template.cost_usd[1]
        if total + high <= budget + 1e-9:
            kept.add(template.id)
            total += high
        else:
            excluded.append(
                Exclusion(
                    template.id,
                    f"over budget: its max estimate ${high:.2f} would bring the total to "
                    f"${total + high:.2f}, above the ${budget:.2f} budget",
                )
            )
    return [t for t in ordered if t.id in kept], excluded


def _parallelism(selected: list[Template], request: PlanRequest) -> tuple[int, int | None]:
    count = max(sum(len(item_batches(t)) if t.items else 1 for t in selected), 1)
    if request.max_parallel is not None and request.max_parallel < 1:
        raise InputError("max_parallel must be at least 1", field="max_parallel")
    if request.priority is Priority.SPEED:
        chosen, expensive = min(count, MAX_WORKERS), None
    elif request.priority is Priority.COST:
        chosen, expensive = min(count, COST_PRIORITY_PARALLEL), None
    else:
        cheap = sum(len(item_batches(t)) if t.items else 1
                    for t in selected if not _is_expensive(t))
        chosen, expensive = min(max(cheap, 1), MAX_WORKERS), 1
    if request.max_parallel is not None:  # an explicit choice wins over the priority's
        chosen = min(count, request.max_parallel)
    return chosen, expensive


def _makespan(durations: list[float], slots: int) -> float:
    """Greedy list scheduling in launch order: when the last template ends."""
    if not durations:
        return 0.0
    ends = [0.0] * max(1, min(slots, len(durations)))
    for duration in durations:
        start = heapq.heappop(ends)
        heapq.heappush(ends, start + duration)
    return max(ends)


def _is_expensive(template: Template) -> bool:
    return template.cost_usd[1] >= EXPENSIVE_USD


def _apply_query(catalog: Catalog, request: PlanRequest) -> tuple[PlanRequest, Reading | None]:
    """Read a free-text request into fields; explicit fields win over the text's."""
    if not request.query:
        return request, None
    reading = read_request(catalog, request.query)
    explicit = request.names or request.suites or request.templates or request.categories
    if reading.choices and not explicit:
        raise AmbiguousRequestError([c.line() for c in reading.choices])
    if not reading.names_something and not explicit:
        raise InputError(
            "nothing to run: the request names no suite, template or category",
            hint="e.g. 'run quick under $10'; list them with `simplectl templates`",
            field="query",
        )
    return PlanRequest(
        names=request.names,
        suites=tuple(dict.fromkeys([*request.suites, *reading.suites])),
        templates=tuple(dict.fromkeys([*request.templates, *reading.templates])),
        categories=request.categories,
        query=None,
        budget_usd=request.budget_usd if request.budget_usd is not None else reading.budget_usd,
        priority=Priority(reading.priority) if reading.priority else request.priority,
        max_parallel=request.max_parallel or reading.max_parallel,
        exclude=tuple(dict.fromkeys([*request.exclude, *reading.exclude])),
        max_runtime_s=request.max_runtime_s or reading.max_runtime_s,
        stages=request.stages,
    ), reading
