"""The checker fails when a stored event is dropped or duplicated (or invented, or a
container is left, or a template has no single terminal result)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.faults.checker import Evidence, check, outbox_rows

SENT = {("sbx-a", 1): {"a1": True, "a2": True, "a3": False}, ("sbx-b", 1): {"b1": True}}
STORED = [("sbx-a", "a1"), ("sbx-a", "a2"), ("sbx-a", "a3"), ("sbx-b", "b1")]
TERMINAL = {"t_a": ["succeeded"], "t_b": ["failed"]}


def evidence(**changes: object) -> Evidence:
    fields: dict[str, object] = {"outboxes": SENT, "stored": STORED, "terminal": TERMINAL,
                                 "templates": ["t_a", "t_b"]}
    fields.update(changes)
    return Evidence(**fields)  # type: ignore[arg-type]


def test_what_was_sent_and_stored_once_holds() -> None:
    verdict = check(evidence())
    assert verdict.held, verdict.problems
    assert (verdict.sent, verdict.acknowledged, verdict.stored) == (4, 3, 4)


@pytest.mark.parametrize("stored", [STORED[1:], STORED[:3]], ids=["first", "last"])
def test_a_dropped_acknowledged_event_fails(stored: list[tuple[str, str]]) -> None:
    problems = check(evidence(stored=stored)).problems
    assert any("acknowledged event(s) not stored" in p for p in problems), problems


def test_a_dropped_unacknowledged_event_fails_when_all_must_arrive() -> None:
    stored = [key for key in STORED if key != ("sbx-a", "a3")]
    assert not check(evidence(stored=stored), all_delivered=False).problems
    problems = check(evidence(stored=stored)).problems
    assert problems == ["1 sent event(s) never stored, e.g. ('sbx-a', 'a3')"]


def test_a_duplicated_event_fails() -> None:
    problems = check(evidence(stored=[*STORED, ("sbx-b", "b1")])).problems
    assert problems == ["1 event(s) stored more than once, e.g. ('sbx-b', 'b1')"]


def test_an_event_no_sandbox_sent_fails() -> None:
    problems = check(evidence(stored=[*STORED, ("sbx-b", "b9")])).problems
    assert problems == ["1 stored event(s) no sandbox sent, e.g. ('sbx-b', 'b9')"]


def test_two_or_no_terminal_results_and_leftover_containers_fail() -> None:
    problems = check(evidence(terminal={"t_a": ["succeeded", "failed"], "t_b": ["running"]},
                              containers_left=["sbx-a"])).problems
    assert len(problems) == 3, problems


def test_outbox_rows_reads_a_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE outbox (seq INTEGER PRIMARY KEY, id TEXT, body TEXT,"
                       " delivered INTEGER); INSERT INTO outbox VALUES (1, 'e1', '{}', 1),"
                       " (2, 'e2', '{}', 0), (3, 'e3', '{}', 2);")
    conn.commit()
    conn.close()
    assert outbox_rows(path.read_bytes()) == {"e1": True, "e2": False, "e3": False}
