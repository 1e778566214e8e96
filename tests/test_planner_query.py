"""The planner reading a free-text `query`: what the text adds, and explicit fields winning.

Every field of the request that the text does not speak to is kept as sent (items and
batch size too); a field both sent and read from the text keeps the sent value.
"""

from __future__ import annotations

import pytest

from controller.api.requests import RunCreate
from controller.catalog.batches import check_items
from controller.catalog.templates import Catalog, load_catalog
from controller.cli.common import run_body
from controller.errors import InputError
from controller.planning.model import PlanRequest, Priority
from controller.planning.plan import plan
from controller.settings import REPO_CATALOG_DIR
from tests.test_planner import excluded_ids, make_catalog, make_template


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog([REPO_CATALOG_DIR])


def batch_catalog() -> Catalog:
    return make_catalog(make_template("batchy", (0.1, 0.5), (2, 4)),
                        make_template("plain", (1, 2), (10, 20)))


ITEMS = check_items([{"item_id": f"i{n}", "data": n} for n in range(25)], "test")


def test_query_portal_under_50_fast(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(query="run all portal templates under $50, fast"))
    assert the_plan.budget_usd == 50
    assert the_plan.priority is Priority.SPEED
    assert sorted([*the_plan.selected, *excluded_ids(the_plan)]) == sorted(
        catalog.suite("portal"))
    assert the_plan.selected
    assert the_plan.estimated_cost_usd[1] <= 50


def test_query_names_a_specific_suite_only(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(query="run quick and portal-test, cheap"))
    assert set(the_plan.selected) == {*catalog.suite("quick"), *catalog.suite("portal-test")}
    assert the_plan.priority is Priority.COST
    assert the_plan.budget_usd is None


def test_query_everything_is_ultra(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(query="run everything"))
    assert len(the_plan.selected) == 64


def test_query_names_a_template(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(query="just board_meeting please"))
    assert the_plan.selected == ("board_meeting",)


def test_query_budget_does_not_override_an_explicit_budget(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(query="all portal templates under $50", budget_usd=12))
    assert the_plan.budget_usd == 12
    assert the_plan.estimated_cost_usd[1] <= 12


def test_query_adds_to_explicit_fields(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(query="and the full suite", templates=("ipo_reverse",)))
    assert set(the_plan.selected) == {*catalog.suite("full"), "ipo_reverse"}


def test_query_that_names_nothing_is_an_input_error(catalog: Catalog) -> None:
    with pytest.raises(InputError, match="nothing to run"):
        plan(catalog, PlanRequest(query="do something nice"))


def test_query_budget_with_thousands_separator(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(query="run everything under $1,000"))
    assert the_plan.budget_usd == 1000
    assert len(the_plan.selected) == 64


# --- the fields the text does not speak to are kept -------------------------------------


def test_a_query_keeps_the_requests_items_and_batch_size() -> None:
    """A run with a query and `--items` is planned with its items (issue 24)."""
    the_plan = plan(batch_catalog(), PlanRequest(query="run batchy", items=ITEMS, batch_size=10))
    assert the_plan.selected == ("batchy",)
    [batches] = the_plan.batches
    assert (batches.template_id, batches.batch_size) == ("batchy", 10)
    assert batches.to_dict()["items"] == 25
    assert batches.to_dict()["sandboxes"] == 3
    # The estimate is per item: the whole template's scales with the 25 items.
    assert the_plan.estimated_cost_usd == (pytest.approx(2.5), pytest.approx(12.5))
    assert the_plan.expensive == ("batchy",)


def test_a_query_plans_the_same_as_the_fields_it_stands_for() -> None:
    by_text = plan(batch_catalog(), PlanRequest(query="run batchy", items=ITEMS, batch_size=10))
    by_fields = plan(batch_catalog(), PlanRequest(templates=("batchy",), items=ITEMS,
                                                  batch_size=10))
    assert by_text == by_fields


# --- explicit fields win over the text's --------------------------------------------------


def test_an_explicit_priority_wins_over_the_querys() -> None:
    the_plan = plan(batch_catalog(), PlanRequest(query="run plain, fast", priority=Priority.COST))
    assert the_plan.priority is Priority.COST
    assert the_plan.max_parallel == 1  # cost: two at a time, of one template


def test_an_explicit_balanced_priority_wins_too() -> None:
    """Balanced is the default, but sent on purpose it is still the caller's choice."""
    the_plan = plan(batch_catalog(),
                    PlanRequest(query="run plain, fast", priority=Priority.BALANCED))
    assert the_plan.priority is Priority.BALANCED


def test_the_querys_priority_applies_when_none_is_given() -> None:
    assert plan(batch_catalog(), PlanRequest(query="run plain, fast")).priority is Priority.SPEED
    assert plan(batch_catalog(), PlanRequest(query="run plain")).priority is Priority.BALANCED


def test_explicit_parallelism_and_runtime_limit_win(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(query="quick, 3 at a time, under 10 minutes",
                                         max_parallel=5, max_runtime_s=1200))
    assert the_plan.max_parallel == 5
    assert the_plan.max_runtime_s == 1200


def test_the_interpretation_says_which_explicit_field_won() -> None:
    the_plan = plan(batch_catalog(), PlanRequest(query="run plain, fast", priority=Priority.COST))
    assert the_plan.interpretation is not None
    assert any("priority" in note and "cost" in note and "speed" in note
               for note in the_plan.interpretation["notes"])


def test_an_api_request_without_a_priority_leaves_it_to_the_query() -> None:
    unsent = RunCreate.model_validate({"query": "run plain, fast"}).plan_request()
    assert plan(batch_catalog(), unsent).priority is Priority.SPEED
    sent = RunCreate.model_validate({"query": "run plain, fast", "priority": "cost"})
    assert plan(batch_catalog(), sent.plan_request()).priority is Priority.COST
    assert plan(batch_catalog(), RunCreate(templates=["plain"]).plan_request()).priority is (
        Priority.BALANCED)


def test_simplectl_sends_a_priority_only_when_one_is_chosen() -> None:
    unchosen = run_body([], None, None, None, "run plain, fast", 0)
    assert "priority" not in unchosen
    assert plan(batch_catalog(), RunCreate.model_validate(unchosen).plan_request()).priority is (
        Priority.SPEED)
    chosen = run_body([], None, Priority.COST, None, "run plain, fast", 0)
    assert chosen["priority"] == "cost"
    assert plan(batch_catalog(), RunCreate.model_validate(chosen).plan_request()).priority is (
        Priority.COST)
