"""The event outbox and its delivery, and the snapshot upload, over real HTTP."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox_image.contract import EventType
from sandbox_image.outbox import EventSender, Outbox
from sandbox_image.retry import Backoff, Deadline
from sandbox_image.snapshot import SnapshotStore, SnapshotUploadError, upload_snapshot

from .conftest import Recorder

FAST = Backoff(base_s=0.01, cap_s=0.05)


@pytest.fixture
def outbox(tmp_path: Path) -> Iterator[Outbox]:
    store = SnapshotStore.create(tmp_path / "snapshot.sqlite")
    yield Outbox(store)
    store.close()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(headers={"Authorization": "Bearer tok"}) as c:
        yield c


def deliver(outbox: Outbox, client: httpx.Client, fake_controller: Recorder,
            timeout_s: float = 10.0) -> tuple[EventSender, int]:
    sender = EventSender(outbox, client, fake_controller.url + "/v1/sandboxes/sb-1/events",
                         backoff=FAST)
    sender.start()
    return sender, sender.flush(Deadline(timeout_s))


def fill(outbox: Outbox, n: int) -> None:
    for i in range(n):
        outbox.append(EventType.PROGRESS, {"step": i + 1})


def test_append_assigns_consecutive_seqs(outbox: Outbox) -> None:
    assert [outbox.append(EventType.PROGRESS, {"step": i}) for i in range(3)] == [1, 2, 3]
    pending = outbox.pending()
    assert [p.seq for p in pending] == [1, 2, 3]
    assert len({p.event_id for p in pending}) == 3
    assert outbox.count_pending() == 3


def test_delivers_in_order_in_batches_of_100(outbox: Outbox, client: httpx.Client,
                                             fake_controller: Recorder) -> None:
    fill(outbox, 250)
    sender, left = deliver(outbox, client, fake_controller)
    assert left == 0
    assert fake_controller.post_sizes == [100, 100, 50]
    assert [e["seq"] for e in fake_controller.events] == list(range(1, 251))
    assert set(fake_controller.post_auth) == {"Bearer tok"}
    event = fake_controller.events[0]
    assert set(event) == {"id", "seq", "type", "time", "data"}
    assert event["type"] == "progress" and event["time"].endswith("Z")
    assert sender.delivered == 250 and outbox.count_pending() == 0


def test_retries_503_and_loses_nothing(outbox: Outbox, client: httpx.Client,
                                       fake_controller: Recorder) -> None:
    fake_controller.fail_posts = 4
    fill(outbox, 7)
    _, left = deliver(outbox, client, fake_controller)
    assert left == 0
    assert [e["seq"] for e in fake_controller.events] == list(range(1, 8))
    assert len(fake_controller.post_sizes) == 5


@pytest.mark.parametrize("status", [429, 503])
def test_waits_at_least_retry_after_then_redelivers(outbox: Outbox, client: httpx.Client,
                                                    fake_controller: Recorder,
                                                    status: int) -> None:
    if status == 429:
        fake_controller.busy_posts = 2
    else:
        fake_controller.fail_posts = 2
        fake_controller.fail_retry_after = "1"
    fill(outbox, 5)
    _, left = deliver(outbox, client, fake_controller)
    assert left == 0
    assert [e["seq"] for e in fake_controller.events] == list(range(1, 6)), "once each, in order"
    assert fake_controller.post_sizes == [5, 5, 5], "the same batch, redelivered"
    times = fake_controller.post_times  # FAST backoff alone would retry within 0.05 s
    assert all(later - earlier >= 0.95 for earlier, later in pairwise(times))


def test_retries_connection_errors_until_the_flush_deadline(outbox: Outbox,
                                                            client: httpx.Client) -> None:
    fill(outbox, 3)
    sender = EventSender(outbox, client, "http://127.0.0.1:9/v1/sandboxes/sb-1/events",
                         backoff=FAST)
    sender.start()
    started = time.monotonic()
    assert sender.flush(Deadline(0.5)) == 3
    assert 0.4 < time.monotonic() - started < 3.0


def test_conflict_drops_only_the_refused_event(outbox: Outbox, client: httpx.Client,
                                               fake_controller: Recorder) -> None:
    def refuse_seq_3(events: list[dict[str, Any]]) -> int:
        return 409 if any(e["seq"] == 3 for e in events) else 200

    fake_controller.event_status = refuse_seq_3
    fill(outbox, 5)
    sender, left = deliver(outbox, client, fake_controller)
    assert left == 0
    assert [e["seq"] for e in fake_controller.events] == [1, 2, 4, 5]
    assert sender.rejected == 1
    assert fake_controller.post_sizes[0] == 5  # then one at a time for that batch
    states = outbox.store.read("SELECT seq, delivered FROM outbox ORDER BY seq", ())
    assert states == [(1, 1), (2, 1), (3, 2), (4, 1), (5, 1)]


def test_422_is_dropped_with_a_warning(outbox: Outbox, client: httpx.Client,
                                       fake_controller: Recorder,
                                       caplog: pytest.LogCaptureFixture) -> None:
    fake_controller.event_status = lambda events: 422
    fill(outbox, 1)
    sender, left = deliver(outbox, client, fake_controller)
    assert left == 0 and sender.rejected == 1
    assert "HTTP 422" in caplog.text and "seq=1" in caplog.text


def test_unauthorized_stops_delivery(outbox: Outbox, client: httpx.Client,
                                     fake_controller: Recorder) -> None:
    fake_controller.event_status = lambda events: 401
    fill(outbox, 2)
    started = time.monotonic()
    sender, left = deliver(outbox, client, fake_controller)
    assert left == 2 and sender.auth_failed
    assert time.monotonic() - started < 2.0
    assert len(fake_controller.post_sizes) == 1


def test_events_appended_while_running_are_delivered(outbox: Outbox, client: httpx.Client,
                                                     fake_controller: Recorder) -> None:
    sender = EventSender(outbox, client, fake_controller.url + "/e", backoff=FAST)
    sender.start()
    fill(outbox, 3)
    assert fake_controller.wait_for(lambda: len(fake_controller.events) == 3, timeout_s=5)
    fill(outbox, 2)
    assert sender.flush(Deadline(5)) == 0
    assert [e["seq"] for e in fake_controller.events] == [1, 2, 3, 4, 5]


def test_backoff_is_capped_with_full_jitter() -> None:
    backoff = Backoff(base_s=1.0, cap_s=8.0, rng=random.Random(1))
    delays = [backoff.delay(n) for n in range(1, 40)]
    assert all(0 <= d <= 8.0 for d in delays)
    assert all(backoff.delay(1) <= 1.0 for _ in range(20))


def test_deadline_is_pulled_in_by_a_stop_request() -> None:
    stop = False
    deadline = Deadline(60, lambda: stop, stop_budget_s=0.2)
    assert deadline.remaining() > 59
    stop = True
    assert deadline.remaining() < 0.21
    started = time.monotonic()
    deadline.sleep(5)
    assert time.monotonic() - started < 1.0


def test_snapshot_upload_retries_503_and_sends_no_authorization(
        tmp_path: Path, fake_controller: Recorder) -> None:
    fake_controller.fail_puts = 2
    store = SnapshotStore.create(tmp_path / "snapshot.sqlite")
    body = store.snapshot_bytes()
    store.close()
    with httpx.Client() as c:
        attempts = upload_snapshot(c, fake_controller.url + "/snap/sb-1", body, Deadline(10), FAST)
    assert attempts == 3
    assert fake_controller.puts == [body] and body.startswith(b"SQLite format 3\x00")
    assert fake_controller.put_auth == [None, None, None]


def test_snapshot_upload_refused_fails_at_once(fake_controller: Recorder) -> None:
    fake_controller.put_status = 403
    with httpx.Client() as c, pytest.raises(SnapshotUploadError, match="HTTP 403"):
        upload_snapshot(c, fake_controller.url + "/snap", b"x", Deadline(10), FAST)
    assert len(fake_controller.put_auth) == 1


def test_snapshot_upload_gives_up_at_the_deadline() -> None:
    started = time.monotonic()
    with httpx.Client() as c, pytest.raises(SnapshotUploadError, match="ConnectError"):
        upload_snapshot(c, "http://127.0.0.1:9/snap", b"x", Deadline(0.5), FAST)
    assert time.monotonic() - started < 3.0
