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


# Measured on the held-out half when issue 29 closed (its third and last look): requests
# right 90.5 %, wrong 1.5 %, asked 8.0 %; questions right 89.4 %. The floor keeps them; the
# issue's targets (right >= 95 %, wrong <= 1 %, questions >= 90 %) are not met yet.
FLOOR_RIGHT, CEILING_WRONG, FLOOR_QUESTIONS = 90.0, 1.5, 89.0


def _held_out(catalog: Catalog) -> tuple[dict[str, float], dict[str, float]]:
    requests = rates([score_request(catalog, r) for r in load("heldout_requests.jsonl")])
    asked = rates([score_question(catalog, q) for q in load("heldout_questions.jsonl")])
    return requests, asked


def test_the_held_out_half_does_not_fall_back(builtin: Catalog) -> None:
    requests, asked = _held_out(builtin)
    assert requests["right"] >= FLOOR_RIGHT and requests["wrong"] <= CEILING_WRONG, requests
    assert asked["right"] >= FLOOR_QUESTIONS, asked


@pytest.mark.xfail(strict=True, reason="issue 29's held-out targets are not met yet "
                   "(right 90.5 %, wrong 1.5 %, questions 89.4 %)")
def test_the_held_out_half_meets_the_targets(builtin: Catalog) -> None:
    requests, asked = _held_out(builtin)
    assert requests["right"] >= TARGET_RIGHT and requests["wrong"] <= TARGET_WRONG, requests
    assert asked["right"] >= TARGET_QUESTIONS, asked
