"""The principal on the independent corpus (tests/principal/corpus), scored as the bench does.

Only rates are asserted and shown: no line of the held-out half is ever printed (its
README says why). The bench (`make bench-principal`) prints the same rates and the p99.
"""

from __future__ import annotations

import pytest

from bench.principal_bench import (
    TARGET_DEV,
    TARGET_QUESTIONS,
    TARGET_RIGHT,
    TARGET_WRONG,
    load,
    rates,
    score_question,
    score_request,
)
from controller.catalog.templates import Catalog

# No database behaviour of its own (or its own SQLite file): once is enough in CI.
pytestmark = pytest.mark.once


def test_the_development_half(builtin: Catalog) -> None:
    requests = rates([score_request(builtin, r) for r in load("dev_requests.jsonl")])
    asked = rates([score_question(builtin, q) for q in load("dev_questions.jsonl")])
    assert requests["right"] >= TARGET_DEV and requests["wrong"] <= TARGET_WRONG, requests
    assert asked["right"] >= TARGET_QUESTIONS, asked


def test_the_held_out_half(builtin: Catalog) -> None:
    requests = rates([score_request(builtin, r) for r in load("heldout_requests.jsonl")])
    asked = rates([score_question(builtin, q) for q in load("heldout_questions.jsonl")])
    assert requests["right"] >= TARGET_RIGHT and requests["wrong"] <= TARGET_WRONG, requests
    assert asked["right"] >= TARGET_QUESTIONS, asked
