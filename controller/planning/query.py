"""A free-text `query` read into the request's fields by the principal's grammar
(`controller.language.grammar`). Pure.

The text adds suites, templates and exclusions to those sent, and fills the budget,
priority, parallelism and runtime limit the request left unset; a field sent explicitly
wins over the text's (the interpretation notes it), and every field the text does not
speak to (items, batch size, stages, names, categories) is kept as sent. A query that is
ambiguous or names nothing is refused with the choices, never guessed at.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controller.catalog.templates import Catalog
from controller.errors import AmbiguousRequestError, InputError
from controller.language.grammar import Reading, read_request
from controller.planning.model import PlanRequest, Priority

# The fields a query may fill (a value the request sent wins), with the word the notes use.
_FILLED = (("budget_usd", "budget"), ("priority", "priority"),
           ("max_parallel", "parallelism"), ("max_runtime_s", "runtime limit"))


def apply_query(catalog: Catalog, request: PlanRequest) -> tuple[PlanRequest, Reading | None]:
    """The request with its query read into its fields (and the query gone), and the
    reading; the request unchanged and None when it has no query."""
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
    read = _read_fields(reading)
    sent = {name: getattr(request, name) for name, _ in _FILLED}
    filled = {name: read[name] if sent[name] is None else sent[name] for name, _ in _FILLED}
    applied = replace(
        request,
        query=None,
        suites=_merged(request.suites, reading.suites),
        templates=_merged(request.templates, reading.templates),
        exclude=_merged(request.exclude, reading.exclude),
        **filled,
    )
    return applied, _noting_overrides(reading, sent, read)


def _read_fields(reading: Reading) -> dict[str, Any]:
    return {
        "budget_usd": reading.budget_usd,
        "priority": Priority(reading.priority) if reading.priority else None,
        "max_parallel": reading.max_parallel,
        "max_runtime_s": reading.max_runtime_s,
    }


def _merged(sent: tuple[str, ...], read: tuple[str, ...]) -> tuple[str, ...]:
    """Both, each once, the sent ones first."""
    return tuple(dict.fromkeys([*sent, *read]))


def _noting_overrides(reading: Reading, sent: dict[str, Any], read: dict[str, Any]) -> Reading:
    """The reading with a note for each field whose explicit value won over the text's."""
    notes = [
        f"the request's {word} ({_shown(sent[name])}) wins over the text's "
        f"({_shown(read[name])})"
        for name, word in _FILLED
        if sent[name] is not None and read[name] is not None and sent[name] != read[name]
    ]
    return replace(reading, notes=(*reading.notes, *notes)) if notes else reading


def _shown(value: Any) -> str:
    return value.value if isinstance(value, Priority) else f"{value:g}"
