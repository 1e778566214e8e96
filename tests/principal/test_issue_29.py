"""Issue 29: the misses operators met, read right now (each failed on the code before).

A misreading that spends more than the words asked for must never happen: words left
unread next to what a request names, or an exclusion that cannot be read, make the
principal ask; it never drops them and plans the rest.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sqlalchemy import Engine

from controller.catalog.templates import Catalog
from controller.errors import AmbiguousRequestError
from controller.planning.model import Priority
from controller.planning.plan import PlanRequest, plan
from controller.principal.conversation import Principal
from controller.runs import create_run

PORTAL_TEST = {"portal_presidential_election", "portal_startup_unicorn",
               "portal_academic_tenure", "portal_startup_failure"}


def _plan(catalog: Catalog, text: str):  # type: ignore[no-untyped-def]
    the_plan = plan(catalog, PlanRequest(query=text))
    assert the_plan.interpretation is not None
    assert the_plan.interpretation["not_understood"] == [], the_plan.interpretation
    return the_plan


def test_a_quantifier_away_from_its_noun(builtin: Catalog) -> None:
    the_plan = _plan(builtin, "please run the quick suite, at most 3 of them at a time")
    assert set(the_plan.selected) == set(builtin.suites["quick"])
    assert the_plan.max_parallel == 3


def test_an_exclusion_is_read_within_what_it_excludes_from(builtin: Catalog) -> None:
    the_plan = _plan(builtin, "the portal templates except portal-test")
    assert set(the_plan.selected) == set(builtin.suites["portal"]) - PORTAL_TEST
    assert {e.template_id for e in the_plan.excluded} == PORTAL_TEST


def test_a_category_in_the_plural_and_a_priority_phrase(builtin: Catalog) -> None:
    the_plan = _plan(builtin, "corporate templates, the cheapest way")
    assert set(the_plan.selected) == set(builtin.suites["corporate"])
    assert the_plan.priority is Priority.COST


@pytest.mark.parametrize("text", [
    "everything in portal-test but portal_startup_unicorn",
    "everything in portal-test but portal_startup_unicron",  # a slip in the id
    "everything in portal-test but the unicorn one",  # words of an id, read within portal-test
])
def test_everything_in_a_suite_but_one_of_them(builtin: Catalog, text: str) -> None:
    the_plan = _plan(builtin, text)
    assert set(the_plan.selected) == PORTAL_TEST - {"portal_startup_unicorn"}
    assert the_plan.max_parallel <= 3


@pytest.mark.parametrize("text", [
    "everything in portal-test but portal_unicorn",  # a template, but not one of portal-test's
    "everything in portal-test but the expensive one",
    "everything in portal-test but that one",
    "run the portal suite except the tenure one",  # four tenure templates in it: which?
    "run everything except the expensive ones",
    "run everything but it",
])
def test_what_cannot_be_read_next_to_everything_is_asked_never_planned(
        builtin: Catalog, text: str) -> None:
    with pytest.raises(AmbiguousRequestError) as asked:
        plan(builtin, PlanRequest(query=text))
    assert asked.value.choices  # what it could mean, each with its count and cost


@pytest.mark.parametrize(("text", "kind"), [
    ("what did the last run cost?", "run_cost"),
    ("which templates are the most expensive?", "most_expensive"),
])
def test_the_two_questions_are_answered_not_met_with_a_menu(
        engine: Engine, builtin: Catalog, text: str, kind: str) -> None:
    run_id, _ = create_run(engine, builtin, PlanRequest(templates=("board_meeting",)), {"q": 1},
                           backend="process", default_image="x")
    controller = SimpleNamespace(
        engine=engine, catalog=builtin, kick=lambda: None, backend=SimpleNamespace(name="x"),
        settings=SimpleNamespace(chat_max_conversations=5, chat_idle_s=60,
                                 confirm_above_usd=25.0))
    reply = Principal(controller).turn(None, text)  # type: ignore[arg-type]
    assert reply["kind"] == "answer" and not reply["choices"] and reply["plan"] is None
    assert run_id in reply["text"] and reply["answer"]["runs"] == [run_id]
