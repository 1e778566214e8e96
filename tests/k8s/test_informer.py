"""The informer's watch bookkeeping with scripted list/watch answers (no server):
resourceVersion follows events and bookmarks, a watch that ends resumes from it, a 410
relists, other failures back off, and objects without our labels stay out."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from controller.backends.kubernetes.informer import Informer

LABELS = {"app.kubernetes.io/managed-by": "simple", "simple.dev/controller": "c1"}


def obj(name: str, version: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version,
                         "labels": LABELS if labels is None else labels}}


class Stream:
    """A streaming answer: the given events, one JSON line each; then it ends, or (with
    `hang`) waits until closed, like a watch the server keeps open."""

    def __init__(self, events: list[dict[str, Any]], hang: bool = False) -> None:
        self.events, self.hang = events, hang
        self.closed = threading.Event()

    def stream(self, _amount: int, decode_content: bool = True) -> Iterator[bytes]:
        for event in self.events:
            yield (json.dumps(event) + "\n").encode()
        if self.hang:
            self.closed.wait(10)

    def close(self) -> None:
        self.closed.set()

    def shutdown(self) -> None:  # what Informer.close calls to unblock a watch's read
        self.closed.set()

    def release_conn(self) -> None:
        pass


class Script:
    """Plays the API server: lists from `lists`, watches from `watches` (then hangs)."""

    def __init__(self, lists: list[tuple[list[Any], str]], watches: list[Any]) -> None:
        self.lists, self.watches = lists, watches
        self.watched_from: list[str | None] = []
        self.delays: list[float] = []
        self.done = threading.Event()

    def list_all(self) -> tuple[list[Any], str]:
        return self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]

    def watch(self, version: str | None) -> Any:
        self.watched_from.append(version)
        if not self.watches:
            self.done.set()
            return Stream([], hang=True)
        answer = self.watches.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def sleep(self, seconds: float) -> bool:
        self.delays.append(seconds)
        return False


@pytest.fixture
def run() -> Iterator[Callable[[Script], Informer]]:
    made: list[Informer] = []

    def start(script: Script) -> Informer:
        informer = Informer("jobs", script.list_all, script.watch, LABELS, lambda: None,
                            sleeper=script.sleep, jitter=lambda: 0.0)
        informer.start()
        made.append(informer)
        assert script.done.wait(10), "the informer never reached its last watch"
        return informer

    yield start
    for informer in made:
        informer.close()


def names(informer: Informer) -> list[str]:
    return sorted(o["metadata"]["name"] for o in informer.items())


def test_versions_follow_events_and_bookmarks(run: Callable[[Script], Informer]) -> None:
    script = Script(
        lists=[([obj("a", "10")], "10")],
        watches=[
            Stream([{"type": "ADDED", "object": obj("b", "11")},
                    {"type": "MODIFIED", "object": obj("a", "12")},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}]),
            Stream([{"type": "DELETED", "object": obj("b", "16")}]),
        ],
    )
    informer = run(script)
    assert script.watched_from == ["10", "15", "16"], "each watch resumes where the last ended"
    assert names(informer) == ["a"]
    assert informer.items()[0]["metadata"]["resourceVersion"] == "12"
    assert informer.lists == 1, "no relist while versions are current"


def test_410_gone_relists(run: Callable[[Script], Informer]) -> None:
    script = Script(
        lists=[([obj("a", "10")], "10"), ([obj("c", "40")], "40")],
        watches=[Stream([{"type": "ERROR", "object": {"code": 410, "message": "too old"}}])],
    )
    informer = run(script)
    assert informer.lists == 2
    assert names(informer) == ["c"], "the relist replaces the cache"
    assert script.watched_from == ["10", "40"]


def test_failures_back_off_then_watch_again(run: Callable[[Script], Informer]) -> None:
    script = Script(lists=[([], "5")],
                    watches=[ConnectionError("reset"), ConnectionError("reset"),
                             Stream([{"type": "ADDED", "object": obj("a", "6")}])])
    informer = run(script)
    assert len(script.delays) == 2 and script.delays[1] > script.delays[0], "capped exponential"
    assert informer.lists == 1, "an error is not a 410: no relist"
    assert names(informer) == ["a"]


def test_objects_without_our_labels_stay_out(run: Callable[[Script], Informer]) -> None:
    other = {"app.kubernetes.io/managed-by": "simple", "simple.dev/controller": "c2"}
    script = Script(lists=[([obj("a", "1"), obj("x", "1", other)], "1")],
                    watches=[Stream([{"type": "ADDED", "object": obj("y", "2", other)}])])
    assert names(run(script)) == ["a"]
