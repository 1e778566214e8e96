"""The exit path finishes each attempt once: an exit seen again by a pass that read the
row before the end was committed must not fetch and load the snapshot a second time."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from controller.attempts import exit_path
from controller.attempts.exit_path import ExitPath
from controller.attempts.finisher import Outcome
from controller.states import SandboxStatus


def _path(monkeypatch: pytest.MonkeyPatch, results: list[bool]) -> tuple[ExitPath, list[Any]]:
    """An exit path whose finisher answers `results` in turn and logs its rows."""
    calls: list[Any] = []

    def finish(row: Any, *rest: Any, **named: Any) -> bool:
        calls.append(row)
        return results[len(calls) - 1]

    finisher: Any = SimpleNamespace(finish=finish)
    path = ExitPath(finisher, lambda: datetime.now(UTC), random.Random(0), lambda: None)
    return path, calls


def _ending(attempt: int = 1) -> Any:
    row = SimpleNamespace(id="sb-1", run_id="run-1", attempt=attempt)
    return lambda: (row, Outcome(SandboxStatus.SUCCEEDED, 0, None))


def test_a_recorded_attempt_is_not_finished_again(monkeypatch: pytest.MonkeyPatch) -> None:
    path, calls = _path(monkeypatch, [True, True])
    path.finish(("sb-1", 1), _ending())
    path.shutdown()  # waits for the first to be recorded
    path._finish_pool = exit_path.ThreadPoolExecutor(1)
    path.finish(("sb-1", 1), _ending())  # a pass's stale row: still "running" there
    path.finish(("sb-1", 2), _ending(2))  # the next attempt is its own
    path.shutdown()
    assert [row.attempt for row in calls] == [1, 2]


def test_an_attempt_not_recorded_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    path, calls = _path(monkeypatch, [False, True])  # e.g. the store is down at first
    path.finish(("sb-1", 1), _ending())
    path.shutdown()
    path._finish_pool = exit_path.ThreadPoolExecutor(1)
    path.finish(("sb-1", 1), _ending())
    path.shutdown()
    assert len(calls) == 2


def test_the_memory_of_recorded_attempts_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exit_path, "RECORDED_MEMORY", 3)
    path, calls = _path(monkeypatch, [True] * 6)
    for n in range(5):
        path.finish((f"sb-{n}", 1), _ending())
    path.shutdown()
    assert len(path._recorded) == 3 and ("sb-0", 1) not in path._recorded
    path._finish_pool = exit_path.ThreadPoolExecutor(1)
    path.finish(("sb-4", 1), _ending())  # remembered: ignored
    path.finish(("sb-0", 1), _ending())  # forgotten: its row decides (here: recorded again)
    path.shutdown()
    assert len(calls) == 6
