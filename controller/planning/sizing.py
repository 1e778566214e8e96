"""The rules that size a run, shared by the flat and the staged plan, and the one place a
`Plan` is assembled. Pure.

Priorities follow the seed's cost optimiser:
- `speed`: everything at once (up to 64), longest first so the makespan is short;
- `cost`: cheapest first in small batches (2 at a time), so a budget stop
  hits the expensive ones;
- `balanced`: cheap templates (max estimate under $10) first and in parallel,
  expensive ones one at a time.
With a budget, templates are kept cheapest first (by max estimate) while the sum of their
max estimates stays within it; the kept ones keep the priority's order. A batch template's
estimates are per item: the whole template's scale with its items (`scaled`).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from controller.catalog.batches import WorkItem, check_batch_size, split
from controller.catalog.templates import Catalog, Template
from controller.errors import InputError
from controller.planning.model import BatchPlan, Exclusion, Plan, PlanRequest, Priority

MAX_WORKERS = 64
COST_PRIORITY_PARALLEL = 2
EXPENSIVE_USD = 10.0


def is_expensive(template: Template) -> bool:
    """At least EXPENSIVE_USD at its max estimate (a batch template: all its items)."""
    return template.cost_usd[1] >= EXPENSIVE_USD


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


def sandbox_count(template: Template) -> int:
    """How many sandboxes the template launches: one per batch, else one."""
    return len(item_batches(template)) if template.items else 1


def scaled(template: Template) -> Template:
    """A batch template's estimates are per item: the whole template's scale with them."""
    if not template.items:
        return template
    n = len(template.items)
    return replace(template, cost_usd=(template.cost_usd[0] * n, template.cost_usd[1] * n))


def per_sandbox(templates: Sequence[Template], index: int) -> list[float]:
    """Runtime estimates (0: min, 1: max) per sandbox, launch order; a batch's scale with
    its items."""
    return [t.runtime_s[index] * (len(batch) if t.items else 1)
            for t in templates for batch in (item_batches(t) if t.items else [()])]


def makespan(durations: list[float], slots: int) -> float:
    """Greedy list scheduling in launch order: when the last sandbox ends."""
    if not durations:
        return 0.0
    ends = [0.0] * max(1, min(slots, len(durations)))
    for duration in durations:
        start = heapq.heappop(ends)
        heapq.heappush(ends, start + duration)
    return max(ends)


def runtime_range(templates: Sequence[Template], slots: int) -> tuple[float, float]:
    """The makespan of the templates' sandboxes in `slots`, at the min and max estimates."""
    return (makespan(per_sandbox(templates, 0), slots),
            makespan(per_sandbox(templates, 1), slots))


def cost_range(templates: Sequence[Template]) -> tuple[float, float]:
    """The sums of the templates' min and max cost estimates."""
    return (round(sum(t.cost_usd[0] for t in templates), 2),
            round(sum(t.cost_usd[1] for t in templates), 2))


def critical_path(templates: Sequence[Template]) -> tuple[str, ...]:
    """The template that ends last (longest max runtime): what the run waits for."""
    return (max(templates, key=lambda t: t.runtime_s[1]).id,) if templates else ()


def longest_first(templates: Sequence[Template]) -> list[Template]:
    """Longest-processing-time first: by the runtime estimate's max, then its min.

    Launched in this order into P slots (each slot takes the next when it frees),
    the makespan stays within 4/3 of the optimum and, with many templates, near the
    lower bound max(longest, total / P). Stable: equal estimates keep their order.
    """
    return sorted(templates, key=lambda t: (-t.runtime_s[1], -t.runtime_s[0]))


def order(templates: Sequence[Template], priority: Priority) -> list[Template]:
    """The launch order the priority asks for."""
    if priority is Priority.SPEED:
        return longest_first(templates)
    if priority is Priority.COST:
        return sorted(templates, key=lambda t: t.cost_usd[0])
    cheap = sorted((t for t in templates if not is_expensive(t)), key=lambda t: t.cost_usd[0])
    expensive = sorted((t for t in templates if is_expensive(t)), key=lambda t: t.cost_usd[0])
    return cheap + expensive


def fit_budget(
    ordered: Sequence[Template], budget: float | None
) -> tuple[list[Template], list[Exclusion]]:
    """Keep, cheapest max estimate first, as many templates as the budget holds; the kept
    ones in their given order, the rest excluded with the reason."""
    if budget is None:
        return list(ordered), []
    if budget <= 0:
        raise InputError("budget_usd must be positive", field="budget_usd")
    kept: set[str] = set()
    excluded: list[Exclusion] = []
    total = 0.0
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


def parallelism(selected: Sequence[Template], request: PlanRequest) -> tuple[int, int | None]:
    """(max_parallel, max_parallel_expensive): the priority's, or an explicit max_parallel."""
    count = max(sum(sandbox_count(t) for t in selected), 1)
    if request.max_parallel is not None and request.max_parallel < 1:
        raise InputError("max_parallel must be at least 1", field="max_parallel")
    priority = request.chosen_priority
    if priority is Priority.SPEED:
        chosen, expensive = min(count, MAX_WORKERS), None
    elif priority is Priority.COST:
        chosen, expensive = min(count, COST_PRIORITY_PARALLEL), None
    else:
        cheap = sum(sandbox_count(t) for t in selected if not is_expensive(t))
        chosen, expensive = min(max(cheap, 1), MAX_WORKERS), 1
    if request.max_parallel is not None:  # an explicit choice wins over the priority's
        chosen = min(count, request.max_parallel)
    return chosen, expensive


def assemble_plan(
    request: PlanRequest,
    selected: Sequence[Template],
    excluded: Sequence[Exclusion],
    *,
    slots: tuple[int, int | None],
    runtime_s: tuple[float, float],
    path: tuple[str, ...],
    stages: tuple[dict[str, Any], ...] = (),
) -> Plan:
    """The one place a `Plan` is built, flat or staged.

    `selected` are the kept templates in launch order, with their items applied and
    `scaled`; `slots` is what `parallelism` chose; `path` the critical path.
    """
    return Plan(
        selected=tuple(t.id for t in selected),
        excluded=tuple(excluded),
        estimated_cost_usd=cost_range(selected),
        estimated_runtime_s=runtime_s,
        max_parallel=slots[0],
        max_parallel_expensive=slots[1],
        priority=request.chosen_priority,
        budget_usd=request.budget_usd,
        expensive=tuple(t.id for t in selected if is_expensive(t)),
        batches=tuple(BatchPlan(t.id, check_batch_size(t.batch_size), tuple(item_batches(t)))
                      for t in selected if t.items),
        max_runtime_s=request.max_runtime_s,
        stages=stages,
        critical_path=path,
    )
