"""Stages without running anything: policies, staged suites in catalog files, staged
plans (per-stage estimates, critical path), and the observed-estimate arithmetic."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from controller.catalog.stages import Policy, PolicyKind, Stage, parse_policy, settle
from controller.catalog.templates import load_catalog
from controller.errors import CatalogError, InputError
from controller.planning.model import PlanRequest, Priority
from controller.planning.plan import plan
from controller.results.estimates import (
    ObservedRange,
    learned_catalog,
    percentile,
    prediction_range,
)
from controller.settings import REPO_CATALOG_DIR
from tests.test_planner import make_catalog, make_template

EXAMPLES = REPO_CATALOG_DIR / "examples"


def test_policies_parse_and_decide() -> None:
    assert parse_policy("all") == Policy(PolicyKind.ALL)
    assert parse_policy({"quorum": 6}) == Policy(PolicyKind.QUORUM, 6)
    for bad in ("most", {"quorum": 0}, {"quorum": True}, {"quorum": 2, "x": 1}, 3):
        with pytest.raises(ValueError, match="all, best_effort or"):
            parse_policy(bad)
    quorum = parse_policy({"quorum": 6})
    eight_with_three_failed = ["succeeded"] * 5 + ["failed"] * 3
    assert not settle(0, quorum, ["succeeded", "running"]).settled
    failed = settle(0, quorum, eight_with_three_failed)
    assert failed.settled and not failed.met
    assert failed.reason == (
        "stage 0 did not meet its policy (quorum 6): 5 of 8 sandboxes succeeded"
    )
    assert settle(0, quorum, ["succeeded"] * 6 + ["failed"] * 2).met
    assert not settle(1, parse_policy("all"), ["succeeded", "timeout"]).met
    assert settle(1, parse_policy("best_effort"), ["failed", "failed"]).met


def test_example_suites_load_as_stages() -> None:
    catalog = load_catalog([REPO_CATALOG_DIR, EXAMPLES])
    assert [len(s.templates) for s in catalog.staged["swarm-8-1"]] == [8, 1]
    assert [len(s.templates) for s in catalog.staged["swarm-1-8"]] == [1, 8]
    assert [len(s.templates) for s in catalog.staged["swarm-8-1-8-1"]] == [8, 1, 8, 1]
    assert catalog.staged["swarm-8-1"][0].policy == Policy(PolicyKind.QUORUM, 6)
    assert len(catalog.suite("swarm-8-1-8-1")) == 18, "a staged suite lists all its templates"
    assert "swarm-8-1" not in load_catalog([REPO_CATALOG_DIR]).suites, "examples are opt-in"


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ("[{templates: [a], policy: {quorum: 2}}]", "fewer than its quorum 2"),
        ("[{templates: [a]}, {templates: [a]}]", "'a' is in stage 0 and stage 1"),
        ("[{templates: [nope]}]", "unknown templates: nope"),
        ("[{templates: [a], policy: most}]", "policy must be all, best_effort"),
        ("[{templates: [a], suites: [missing]}]", "unknown (or staged) suite 'missing'"),
    ],
)
def test_bad_staged_suites_are_refused_naming_the_fault(
    catalog_dir: Callable[..., Path], stages: str, message: str
) -> None:
    directory = catalog_dir(
        "templates:\n"
        "  - {id: a, category: t, estimate: {cost_usd: [1, 2], runtime_s: [1, 2]}}\n"
        "  - {id: b, category: t, estimate: {cost_usd: [1, 2], runtime_s: [1, 2]}}\n"
        f"suites:\n  staged:\n    stages: {stages}\n"
    )
    with pytest.raises(CatalogError) as caught:
        load_catalog([directory])
    assert message in str(caught.value)
    assert "suites.staged" in str(caught.value) or "suite 'staged'" in str(caught.value)


def _staged_catalog():  # type: ignore[no-untyped-def]
    templates = [make_template(f"e{i}", (1.0, 2.0), (10.0, 10.0 + i)) for i in range(1, 5)]
    templates.append(make_template("judge", (0.5, 1.0), (5.0, 7.0)))
    catalog = make_catalog(*templates)
    stages = (
        Stage(("e1", "e2", "e3", "e4"), parse_policy({"quorum": 3})),
        Stage(("judge",), parse_policy("all")),
    )
    return catalog.__class__(catalog.templates, {**catalog.suites}, {"ej": stages})


def test_staged_plan_has_stage_estimates_and_the_critical_path() -> None:
    catalog = _staged_catalog()
    result = plan(catalog, PlanRequest(names=("ej",), priority=Priority.SPEED)).to_dict()
    assert [s["templates"] for s in result["stages"]] == [["e4", "e3", "e2", "e1"], ["judge"]]
    assert result["stages"][0]["policy"] == {"quorum": 3}
    assert result["stages"][0]["estimated_cost_usd"] == [4.0, 8.0]
    assert result["stages"][0]["estimated_runtime_s"] == [10.0, 14.0]
    assert result["estimated_runtime_s"] == [15.0, 21.0], "stages run one after another"
    assert result["critical_path"] == ["e4", "judge"]
    assert result["estimates"]["judge"]["estimate_source"] == "catalog"


def test_staged_requests_are_checked() -> None:
    catalog = _staged_catalog()
    with pytest.raises(InputError, match="must be run on its own"):
        plan(catalog, PlanRequest(names=("ej", "e1")))
    with pytest.raises(InputError, match="too few for its policy"):
        plan(catalog, PlanRequest(names=("ej",), budget_usd=5.0))
    request = PlanRequest(stages=(Stage(("e1",), Policy(PolicyKind.ALL)),
                                  Stage(("e1",), Policy(PolicyKind.ALL))))
    with pytest.raises(InputError, match="a template runs once per run"):
        plan(catalog, request)


def test_prediction_range_covers_p10_p90_and_widens_for_few_runs() -> None:
    values = [1.0, 1.1, 0.9, 1.05, 0.95]
    low, high = prediction_range(values)
    assert low <= percentile(values, 0.1) and high >= percentile(values, 0.9)
    assert (low, high) == pytest.approx((0.8154, 1.1846), abs=1e-3)
    many = [1.0, 1.1, 0.9, 1.05, 0.95] * 10
    assert prediction_range(many)[1] - prediction_range(many)[0] < high - low
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0


def test_learned_catalog_uses_observations_and_says_so() -> None:
    catalog = _staged_catalog()
    ranges = {"e1": ObservedRange(n=5, cost_usd=(0.1, 0.2), runtime_s=(1.0, 3.0))}
    learned, sources = learned_catalog(catalog, ranges)
    assert learned.templates["e1"].cost_usd == (0.1, 0.2)
    assert catalog.templates["e1"].cost_usd == (1.0, 2.0), "the catalog itself is unchanged"
    result = plan(learned, PlanRequest(templates=("e1", "e2")), sources).to_dict()
    assert result["estimates"]["e1"]["estimate_source"] == "observed (n=5)"
    assert result["estimates"]["e2"]["estimate_source"] == "catalog"
    assert result["estimated_cost_usd"] == [1.1, 2.2]
