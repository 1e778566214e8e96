"""The planner: budgets, priorities, parallelism, estimates, name resolution (free text:
test_planner_query.py).

Property-style checks run over the built-in catalog with seeded random subsets;
the exact estimates are checked on tiny synthetic catalogs built here.
"""

from __future__ import annotations

import random

import pytest

from controller.catalog.templates import Catalog, Template, load_catalog
from controller.errors import InputError, UnknownNameError
from controller.planning.model import Plan, PlanRequest, Priority
from controller.planning.plan import plan
from controller.planning.sizing import EXPENSIVE_USD, MAX_WORKERS
from controller.settings import REPO_CATALOG_DIR


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog([REPO_CATALOG_DIR])


def make_template(template_id: str, cost: tuple[float, float], runtime: tuple[float, float],
                  category: str = "syn") -> Template:
    return Template(
        id=template_id, category=category, description="", mechanisms=("M1",), tags=(),
        cost_usd=cost, runtime_s=runtime, timeout_s=3600, cpu="1", memory="512Mi",
        image=None, command=None, config={},
    )


def make_catalog(*templates: Template, suites: dict[str, tuple[str, ...]] | None = None
                 ) -> Catalog:
    merged: dict[str, tuple[str, ...]] = {}
    for t in templates:
        merged[t.category] = (*merged.get(t.category, ()), t.id)
    merged.update(suites or {})
    return Catalog(templates={t.id: t for t in templates}, suites=merged)


def max_sum(catalog: Catalog, ids: tuple[str, ...] | list[str]) -> float:
    return sum(catalog.templates[t].cost_usd[1] for t in ids)


def excluded_ids(the_plan: Plan) -> list[str]:
    return [e.template_id for e in the_plan.excluded]


# --- budgets ---------------------------------------------------------------------------


def test_budget_property_over_random_requests(catalog: Catalog) -> None:
    rng = random.Random(20261121)
    ids = list(catalog.templates)
    checked = 0
    for _ in range(400):
        subset = tuple(rng.sample(ids, rng.randint(1, len(ids))))
        priority = rng.choice(list(Priority))
        # Budgets below, between and exactly on the sums of the max estimates.
        budget = rng.choice([
            round(rng.uniform(0.5, 1.2 * max_sum(catalog, subset)), 2),
            max_sum(catalog, rng.sample(subset, rng.randint(1, len(subset)))),
            float(rng.randint(1, 60)),
        ])
        the_plan = plan(catalog, PlanRequest(templates=subset, budget_usd=budget,
                                             priority=priority))
        selected, excluded = the_plan.selected, excluded_ids(the_plan)

        assert max_sum(catalog, selected) <= budget + 1e-9
        assert the_plan.estimated_cost_usd[1] <= budget + 1e-9
        assert set(selected).isdisjoint(excluded)
        assert sorted([*selected, *excluded]) == sorted(subset)
        assert len(set(selected)) == len(selected)
        spent = max_sum(catalog, selected)
        for exclusion in the_plan.excluded:
            # Nothing left out would still have fitted.
            assert spent + catalog.templates[exclusion.template_id].cost_usd[1] > budget
            assert "over budget" in exclusion.reason
            assert f"${budget:.2f} budget" in exclusion.reason
        # The budget only drops templates; it never reorders the launch order.
        unbounded = plan(catalog, PlanRequest(templates=subset, priority=priority)).selected
        assert list(selected) == [t for t in unbounded if t in set(selected)]
        checked += bool(excluded)
    assert checked > 50, "the random budgets should exclude something fairly often"


@pytest.mark.parametrize("priority", list(Priority))
def test_budget_that_fits_everything_excludes_nothing(catalog: Catalog, priority) -> None:
    everything = max_sum(catalog, catalog.suite("ultra"))
    the_plan = plan(catalog, PlanRequest(suites=("ultra",), budget_usd=everything,
                                         priority=priority))
    assert len(the_plan.selected) == 64
    assert the_plan.excluded == ()
    assert the_plan.estimated_cost_usd[1] == pytest.approx(everything)


def test_exclusion_reason_names_the_template_cost_and_budget() -> None:
    cat = make_catalog(make_template("cheap", (1, 4), (10, 10)),
                       make_template("pricey", (5, 9), (10, 10)))
    the_plan = plan(cat, PlanRequest(templates=("cheap", "pricey"), budget_usd=10,
                                     priority=Priority.COST))
    assert the_plan.selected == ("cheap",)
    [exclusion] = the_plan.excluded
    assert exclusion.template_id == "pricey"
    assert "$9.00" in exclusion.reason
    assert "$13.00" in exclusion.reason
    assert "$10.00 budget" in exclusion.reason
    assert the_plan.budget_usd == 10


def test_budget_below_everything_selects_nothing(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(suites=("quick",), budget_usd=0.5))
    assert the_plan.selected == ()
    assert sorted(excluded_ids(the_plan)) == sorted(catalog.suite("quick"))
    assert the_plan.estimated_cost_usd == (0, 0)
    assert the_plan.estimated_runtime_s == (0.0, 0.0)


@pytest.mark.parametrize("budget", [0, -5])
def test_non_positive_budget_is_an_input_error(catalog: Catalog, budget: float) -> None:
    with pytest.raises(InputError) as e:
        plan(catalog, PlanRequest(suites=("quick",), budget_usd=budget))
    assert e.value.field == "budget_usd"


# --- priorities ------------------------------------------------------------------------


def test_speed_runs_everything_at_once_longest_first(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(suites=("quick", "full"), priority=Priority.SPEED))
    longest = [catalog.templates[t].runtime_s[1] for t in the_plan.selected]
    assert longest == sorted(longest, reverse=True)
    assert the_plan.max_parallel == len(the_plan.selected) == 13
    assert the_plan.max_parallel_expensive is None
    assert the_plan.priority is Priority.SPEED


def test_speed_on_ultra_uses_64_workers(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(suites=("ultra",), priority=Priority.SPEED))
    assert len(the_plan.selected) == 64
    assert the_plan.max_parallel == MAX_WORKERS == 64


def test_speed_parallelism_is_capped_at_64() -> None:
    many = [make_template(f"t{i:03d}", (1, 2), (10 + i, 20 + i)) for i in range(70)]
    the_plan = plan(make_catalog(*many), PlanRequest(suites=("syn",), priority=Priority.SPEED))
    assert len(the_plan.selected) == 70
    assert the_plan.max_parallel == 64
    assert the_plan.selected[0] == "t069"


def test_cost_runs_cheapest_first_two_at_a_time(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(suites=("portal",), priority=Priority.COST))
    cheapest = [catalog.templates[t].cost_usd[0] for t in the_plan.selected]
    assert cheapest == sorted(cheapest)
    assert cheapest[0] < cheapest[-1]
    assert the_plan.max_parallel == 2
    assert the_plan.max_parallel_expensive is None


def test_cost_with_one_template_runs_one() -> None:
    cat = make_catalog(make_template("only", (1, 2), (5, 5)))
    assert plan(cat, PlanRequest(templates=("only",), priority=Priority.COST)).max_parallel == 1


def test_balanced_runs_cheap_first_then_expensive_one_at_a_time(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(suites=("quick", "portal-timepoint")))
    assert the_plan.priority is Priority.BALANCED
    highs = [catalog.templates[t].cost_usd[1] for t in the_plan.selected]
    cheap = [t for t, high in zip(the_plan.selected, highs, strict=True) if high < EXPENSIVE_USD]
    expensive = [t for t, high in zip(the_plan.selected, highs, strict=True)
                 if high >= EXPENSIVE_USD]
    assert list(the_plan.selected) == cheap + expensive
    thorough = set(catalog.suite("portal-timepoint-simjudged-thorough"))
    assert set(the_plan.expensive) == set(expensive) == thorough
    assert the_plan.max_parallel == len(cheap) == 7 + 15
    assert the_plan.max_parallel_expensive == 1
    for group in (cheap, expensive):
        lows = [catalog.templates[t].cost_usd[0] for t in group]
        assert lows == sorted(lows)


def test_balanced_threshold_is_the_expensive_max_estimate() -> None:
    cat = make_catalog(make_template("at_20", (1, EXPENSIVE_USD), (1, 1)),
                       make_template("under_20", (0.9, EXPENSIVE_USD - 0.01), (1, 1)),
                       make_template("cheapest", (0.5, 1), (1, 1)))
    the_plan = plan(cat, PlanRequest(suites=("syn",)))
    assert the_plan.selected == ("cheapest", "under_20", "at_20")
    assert the_plan.expensive == ("at_20",)
    assert the_plan.max_parallel == 2


def test_balanced_with_only_expensive_templates_runs_one() -> None:
    cat = make_catalog(make_template("a", (EXPENSIVE_USD, 40), (1, 1)),
                       make_template("b", (25, 50), (1, 1)))
    the_plan = plan(cat, PlanRequest(suites=("syn",)))
    assert the_plan.max_parallel == 1
    assert the_plan.max_parallel_expensive == 1


@pytest.mark.parametrize("priority", list(Priority))
@pytest.mark.parametrize("wanted", [1, 3, 5])
def test_explicit_max_parallel_wins(catalog: Catalog, priority, wanted: int) -> None:
    the_plan = plan(catalog, PlanRequest(suites=("quick", "full"), priority=priority,
                                         max_parallel=wanted))
    assert the_plan.max_parallel == wanted


def test_max_parallel_never_exceeds_the_selection(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(suites=("quick",), max_parallel=500))
    assert the_plan.max_parallel == 7


def test_max_parallel_below_one_is_an_input_error(catalog: Catalog) -> None:
    with pytest.raises(InputError) as e:
        plan(catalog, PlanRequest(suites=("quick",), max_parallel=0))
    assert e.value.field == "max_parallel"


# --- estimates -------------------------------------------------------------------------


@pytest.mark.parametrize("suite", ["quick", "corporate", "portal", "ultra"])
def test_estimated_cost_is_the_sum_of_the_selected(catalog: Catalog, suite: str) -> None:
    the_plan = plan(catalog, PlanRequest(suites=(suite,)))
    members = [catalog.templates[t] for t in catalog.suite(suite)]
    assert the_plan.estimated_cost_usd == (
        pytest.approx(sum(t.cost_usd[0] for t in members)),
        pytest.approx(sum(t.cost_usd[1] for t in members)),
    )


def runtime_catalog() -> Catalog:
    # Cheapest first (priority cost) gives the launch order a, b, c, d.
    return make_catalog(
        make_template("a", (1, 2), (10, 100)),
        make_template("b", (2, 3), (20, 50)),
        make_template("c", (3, 4), (30, 30)),
        make_template("d", (4, 5), (5, 40)),
    )


@pytest.mark.parametrize(("slots", "expected"), [
    # two slots, max: a 0-100 | b 0-50, c 50-80, d 80-120; min: a 0-10, c 10-40 | b 0-20, d 20-25
    (2, (40.0, 120.0)),
    (1, (65.0, 220.0)),  # one at a time: the sums
    (3, (30.0, 100.0)),  # max: a 0-100 | b 0-50 | c 0-30, d 30-70
    (4, (30.0, 100.0)),  # all at once: the longest
])
def test_estimated_runtime_is_list_scheduling(slots: int, expected) -> None:
    the_plan = plan(runtime_catalog(), PlanRequest(suites=("syn",), priority=Priority.COST,
                                                  max_parallel=slots))
    assert the_plan.selected == ("a", "b", "c", "d")
    assert the_plan.max_parallel == slots
    assert the_plan.estimated_runtime_s == expected


def test_estimated_runtime_follows_the_launch_order() -> None:
    # Longest first (speed) with two slots: a 0-100 | b 0-50, d 50-90, c 90-120.
    the_plan = plan(runtime_catalog(), PlanRequest(suites=("syn",), priority=Priority.SPEED,
                                                  max_parallel=2))
    assert the_plan.selected == ("a", "b", "d", "c")
    assert the_plan.estimated_runtime_s[1] == 120.0


def test_estimated_runtime_bounds_on_the_builtin_catalog(catalog: Catalog) -> None:
    for priority in Priority:
        the_plan = plan(catalog, PlanRequest(suites=("ultra",), priority=priority))
        templates = [catalog.templates[t] for t in the_plan.selected]
        for index in (0, 1):
            durations = [t.runtime_s[index] for t in templates]
            estimate = the_plan.estimated_runtime_s[index]
            assert max(durations) <= estimate <= sum(durations)
            # List scheduling is never worse than twice the optimum's lower bound.
            assert estimate <= sum(durations) / the_plan.max_parallel + max(durations)


# --- names, suites, categories ---------------------------------------------------------


def names_catalog() -> Catalog:
    return make_catalog(
        make_template("alpha", (1, 2), (1, 1)),
        make_template("beta", (1, 2), (1, 1), category="greek"),
        make_template("gamma", (1, 2), (1, 1), category="greek"),
        suites={"alpha": ("beta", "gamma")},
    )


def test_a_suite_wins_over_a_template_of_the_same_name() -> None:
    the_plan = plan(names_catalog(), PlanRequest(names=("alpha",)))
    assert set(the_plan.selected) == {"beta", "gamma"}


def test_a_name_that_is_only_a_template_selects_it() -> None:
    assert plan(names_catalog(), PlanRequest(names=("gamma",))).selected == ("gamma",)


def test_the_template_field_still_reaches_a_shadowed_template() -> None:
    assert plan(names_catalog(), PlanRequest(templates=("alpha",))).selected == ("alpha",)


def test_unknown_name_is_named(catalog: Catalog) -> None:
    with pytest.raises(UnknownNameError, match="no_such_thing") as e:
        plan(catalog, PlanRequest(names=("quick", "no_such_thing")))
    assert e.value.field == "names"
    assert e.value.hint


def test_unknown_suite_template_and_category(catalog: Catalog) -> None:
    with pytest.raises(UnknownNameError, match="nope-suite") as e:
        plan(catalog, PlanRequest(suites=("nope-suite",)))
    assert e.value.field == "suites"
    with pytest.raises(UnknownNameError, match="nope_template") as e:
        plan(catalog, PlanRequest(templates=("nope_template",)))
    assert e.value.field == "templates"
    with pytest.raises(InputError, match="nope-category") as e:
        plan(catalog, PlanRequest(categories=("nope-category",)))
    assert e.value.field == "categories"
    assert "corporate" in (e.value.hint or "")


def test_category_selects_its_templates(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(categories=("portal-test",)))
    assert sorted(the_plan.selected) == sorted(
        t.id for t in catalog.templates.values() if t.category == "portal-test")


def test_overlapping_requests_select_each_template_once(catalog: Catalog) -> None:
    the_plan = plan(catalog, PlanRequest(names=("quick", "board_meeting"), suites=("quick",),
                                         templates=("board_meeting", "ipo_reverse"),
                                         categories=("quick",)))
    assert len(the_plan.selected) == len(set(the_plan.selected)) == 8
    assert set(the_plan.selected) == {*catalog.suite("quick"), "ipo_reverse"}


def test_empty_selection_is_an_input_error(catalog: Catalog) -> None:
    with pytest.raises(InputError, match="nothing to run") as e:
        plan(catalog, PlanRequest())
    assert e.value.hint


def test_plan_to_dict_shape(catalog: Catalog) -> None:
    data = plan(catalog, PlanRequest(suites=("quick",), budget_usd=12)).to_dict()
    assert {"selected", "excluded", "estimated_cost_usd", "max_parallel",
            "estimated_runtime_s"} <= set(data)
    assert all(set(e) == {"template_id", "reason"} for e in data["excluded"])
    assert len(data["estimated_cost_usd"]) == 2
    assert data["priority"] == "balanced"
    assert data["budget_usd"] == 12
