"""A free-text `query` read into the request's fields by the principal's grammar
(`controller.language.grammar`). Pure.

A query that is ambiguous or names nothing is refused with the choices, never guessed at.
"""

from __future__ import annotations

from controller.catalog.templates import Catalog
from controller.errors import AmbiguousRequestError, InputError
from controller.language.grammar import Reading, read_request
from controller.planning.model import PlanRequest, Priority


def apply_query(catalog: Catalog, request: PlanRequest) -> tuple[PlanRequest, Reading | None]:
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
