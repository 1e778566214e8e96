"""The plan of a run: catalog + request -> `Plan`. Pure: data in, data out, no I/O.

`plan` reads a free-text `query` into the request (`query`), then plans a staged run
stage by stage (`staged`) or a flat one here: the templates named, less those excluded
on request or over the runtime limit, ordered by the priority and fitted to the budget
(the rules are in `sizing`). The plan also says per template where its estimate comes
from and, for a query, how the text was read (`interpretation`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from controller.catalog.templates import Catalog, Template
from controller.errors import InputError, UnknownNameError
from controller.planning.model import Exclusion, Plan, PlanRequest
from controller.planning.query import apply_query
from controller.planning.sizing import (
    assemble_plan,
    critical_path,
    fit_budget,
    order,
    parallelism,
    runtime_range,
    scaled,
    with_items,
)
from controller.planning.staged import plan_staged, requested_stages


def plan(
    catalog: Catalog, request: PlanRequest, sources: Mapping[str, str] | None = None
) -> Plan:
    """Select, order and size a run from the catalog; a staged one stage by stage.

    `sources` says, per template, where its estimate comes from (`catalog`, or
    `observed (n=…)` when `catalog` carries ranges learnt from earlier runs).
    """
    request, reading = apply_query(catalog, request)
    stages = requested_stages(catalog, request)
    result = plan_staged(catalog, request, stages) if stages else _plan_flat(catalog, request)
    return replace(
        result,
        interpretation=reading.interpretation() if reading else None,
        estimates=_estimates(catalog, result.selected, sources or {}),
    )


def _plan_flat(catalog: Catalog, request: PlanRequest) -> Plan:
    wanted, asked_out = _without_exclusions(_select(catalog, request), request, catalog)
    _check_items_request(wanted, request)
    templates = [scaled(with_items(catalog, request, t)) for t in wanted]
    ordered = order(templates, request.chosen_priority)
    ordered, too_long = _fit_runtime(ordered, request.max_runtime_s)
    selected, over_budget = fit_budget(ordered, request.budget_usd)
    slots = parallelism(selected, request)
    return assemble_plan(
        request, selected, [*asked_out, *too_long, *over_budget], slots=slots,
        runtime_s=runtime_range(selected, slots[0]), path=critical_path(selected),
    )


def _check_items_request(wanted: list[str], request: PlanRequest) -> None:
    if request.items is not None and len(wanted) != 1:
        raise InputError(f"items were given for {len(wanted)} templates; name exactly one",
                         hint="e.g. `simplectl run TEMPLATE --items FILE`", field="items")


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


def _estimates(
    catalog: Catalog, selected: tuple[str, ...], sources: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Per selected template, the estimate planned with and where it comes from."""
    return {
        t: {
            "cost_usd": list(catalog.templates[t].cost_usd),
            "runtime_s": list(catalog.templates[t].runtime_s),
            "estimate_source": sources.get(t, "catalog"),
        }
        for t in selected
    }
