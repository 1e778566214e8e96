"""Property test: requests composed of suite names and number phrases, in any order.

Each number must land in its own field (money in the budget, "N at a time" in the
parallelism, "under N minutes" in the runtime limit), and every suite named must be
in the reading, whatever the order and the separators.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.catalog.templates import load_catalog
from controller.language.grammar import read_request
from controller.settings import REPO_CATALOG_DIR

# No database behaviour of its own (or its own SQLite file): once is enough in CI.
pytestmark = pytest.mark.once

CATALOG = load_catalog([REPO_CATALOG_DIR])
# Suites named by their exact names. A bare "portal" could be three sets and is answered
# with choices, and "quick" is also a judging level: next to another suite with only a
# space between ("run full quick") it is asked about; test_grammar covers both.
SUITES = sorted(s for s in CATALOG.suites if s not in ("portal", "quick"))
MONEY = ["under ${}", "${}", "{} dollars", "{} usd", "a budget of {}", "budget ${}",
         "spend at most ${}", "{} bucks", "for ${}", "at most {} usd"]
PARALLEL = ["{} at a time", "max {} in parallel", "{} in parallel", "parallelism of {}",
            "at most {} concurrent", "no more than {} at once", "with {} workers"]
TIME = [("under {} minutes", 60), ("within {} seconds", 1), ("in {} hours", 3600),
        ("under {} min", 60), ("in less than {} mins", 60), ("within {}h", 3600)]
SEPARATORS = [", ", " and ", " ", "; ", " with "]

money = st.one_of(
    st.integers(1, 100_000).map(str),
    st.decimals(min_value=1, max_value=999, places=2).map(str),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, list[str], float | None, int | None, int | None]:
    suites = draw(st.lists(st.sampled_from(SUITES), min_size=1, max_size=4, unique=True))
    parts = [*suites]
    budget = parallel = runtime = None
    if draw(st.booleans()):
        amount = draw(money)
        parts.append(draw(st.sampled_from(MONEY)).format(amount))
        budget = float(amount)
    if draw(st.booleans()):
        parallel = draw(st.integers(1, 64))
        parts.append(draw(st.sampled_from(PARALLEL)).format(parallel))
    if draw(st.booleans()):
        value = draw(st.integers(1, 600))
        phrase, unit = draw(st.sampled_from(TIME))
        parts.append(phrase.format(value))
        runtime = value * unit
    order = draw(st.permutations(parts))
    text = "run " + "".join(
        part + (draw(st.sampled_from(SEPARATORS)) if i < len(order) - 1 else "")
        for i, part in enumerate(order)
    )
    return text, suites, budget, parallel, runtime


@settings(max_examples=200, deadline=None)
@given(requests())
def test_numbers_land_in_their_fields_and_no_suite_is_dropped(
    request: tuple[str, list[str], float | None, int | None, int | None],
) -> None:
    text, suites, budget, parallel, runtime = request
    reading = read_request(CATALOG, text)
    assert reading.budget_usd == budget, text
    assert reading.max_parallel == parallel, text
    assert reading.max_runtime_s == runtime, text
    assert set(suites) <= set(reading.suites), text
    assert not reading.choices, text
    assert not reading.not_understood, (text, reading.not_understood)
