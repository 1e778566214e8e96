"""Questions told from requests and read into a kind and a subject (pure, no database).

The phrasings here are this test's own; the corpus (tests/principal/corpus) measures the
reader on phrasings it was never tuned on, through bench/principal_bench.py.
"""

from __future__ import annotations

import pytest

from controller.catalog.templates import Catalog
from controller.language.questions import recognise

# No database behaviour of its own (or its own SQLite file): once is enough in CI.
pytestmark = pytest.mark.once


@pytest.mark.parametrize(("text", "kind", "subject"), [
    # issue 29: both were answered with a menu of suites to start
    ("what did the last run cost?", "run_cost", "last"),
    ("which templates are the most expensive?", "most_expensive", None),
    ("how much have we spent this week?", "run_cost", None),
    ("what was the bill for the previous run?", "run_cost", "previous"),
    ("how much did run-0a1b2c3d cost in the end?", "run_cost", "run-0a1b2c3d"),
    ("what's the average cost of kami_shrine per run?", "template_cost", "kami_shrine"),
    ("how much does portal_unicorn typically cost?", "template_cost", "portal_unicorn"),
    ("what does board_meeting cost?", "template_cost", "board_meeting"),  # what it has cost
    ("top spenders?", "most_expensive", None),
    ("show me the most expensive ones from the last run", "most_expensive", "last"),
    ("why did the last run fail?", "failures", "last"),
    ("what went wrong with board meeting?", "failures", "board_meeting"),
    ("is kami_shrine reliable?", "failures", "kami_shrine"),
    ("what are our flakiest sims?", "least_reliable", None),
    ("what has the highest failure rate?", "least_reliable", None),
    ("how did this run do compared to the previous one", "compare_runs", "last"),
    ("is run-0a1b2c3d better than the one before?", "compare_runs", "run-0a1b2c3d"),
    ("what changed since the previous run?", "compare_runs", None),
    ("what's blocking the run?", "waiting", None),
    ("why hasn't kami_shrine launched?", "waiting", "kami_shrine"),
    ("how long until the run finishes?", "status", None),
    ("status of the last run", "status", "last"),
    ("how many tokens did the last run use?", "tokens", "last"),
    ("how many tokns did hospital_crisis use", "tokens", "hospital_crisis"),
    ("did board_meeting run ok?", "status", "board_meeting"),
])
def test_a_question_is_read_with_its_kind_and_subject(
        builtin: Catalog, text: str, kind: str, subject: str | None) -> None:
    question = recognise(builtin, text)
    assert question is not None, text
    assert (question.kind, question.subject) == (kind, subject)


@pytest.mark.parametrize("text", [
    "run quick and tell me the cost",
    "can you run corporate and tell me what failed",
    "start portal-test, and how long will that take?",
    "run the most expensive templates",  # a request: it names no set, so it is asked about
    "please rerun the failed ones from the last run",
    "what does ultra cost?",  # a price of a suite, asked in the present: a plan
    "how much would the full suite cost?",
    "We're comparing the detective scenarios, so could you run full",
])
def test_a_request_is_never_taken_for_a_question(builtin: Catalog, text: str) -> None:
    assert recognise(builtin, text) is None
