# ruff: noqa: F811 - the fixtures imported from tests.services are parameters here
"""High availability under faults, with real processes: two reconcilers (one leads under a
3 s lease), two API replicas behind HAProxy, PostgreSQL, the process backend (Docker with
64 sandboxes would be too slow on this 2-core machine; the adoption is the same code).

- the leader `kill -9`ed mid-run: the standby leads within lease + 5 s, every sandbox
  ends once, none is started twice, no event lost or doubled, and a CI client polling
  through the load balancer sees no error;
- the leader paused (SIGSTOP) for twice the lease, then resumed: it launches, stops and
  records nothing after resuming, and steps down; the run ends as above;
- an API replica killed while the sandboxes send events through the load balancer:
  every event stored once.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from controller.db.engine import create_db_engine
from controller.db.schema import events
from controller.settings import Settings
from controller.store import create_store
from tests.faults.checker import Evidence, Verdict, check, gather
from tests.faults.conftest import record_case
from tests.faults.ha_bed import LEASE_S, HaBed, Poller, haproxy_binary
from tests.services import pg_server, pg_server_url  # noqa: F401 - fixtures

pytestmark = [pytest.mark.faults, pytest.mark.once, pytest.mark.postgres,
              pytest.mark.timeout(600)]

SANDBOXES = 16
# About 40 progress events per sandbox over ~10 s: long enough to outlive a takeover.
STEADY = {"agents": 1, "steps": 40, "llm_latency_ms": 250, "max_concurrency": 1,
          "checkpoint_every_steps": 10_000}
# Anything the leader logs when it launches, stops or records an end.
ACTS = ("launched sandbox", "stopping sandbox", " ended ", "retry in", "finished:")

BedFactory = Callable[..., HaBed]


@pytest.fixture
def ha(pg_server_url: str, tmp_path: Path) -> Iterator[BedFactory]:
    if haproxy_binary() is None:
        pytest.fail("haproxy is not installed: apt-get install -y haproxy")
    beds: list[HaBed] = []

    def make(config: dict[str, Any] = STEADY, count: int = SANDBOXES,
             backend: str = "process") -> HaBed:
        bed = HaBed(pg_server_url, tmp_path, count, config, backend)
        beds.append(bed)
        bed.start()
        return bed

    yield make
    for bed in beds:
        bed.stop()


def verdict(bed: HaBed, run_id: str) -> tuple[Verdict, dict[str, set[int]]]:
    """The checker's verdict, and per sandbox the attempts that sent a `started` event
    (a sandbox started twice would show two)."""
    engine = create_db_engine(bed.database_url)
    store = create_store(Settings(data_dir=bed.data_dir, database_url=bed.database_url))
    try:
        outboxes, stored, terminal, without = gather(engine, store, run_id)
        with engine.connect() as conn:
            started = conn.execute(select(events.c.sandbox_id, events.c.attempt).where(
                events.c.run_id == run_id, events.c.type == "started")).all()
    finally:
        engine.dispose()
    attempts: dict[str, set[int]] = {}
    for sandbox_id, attempt in started:
        attempts.setdefault(sandbox_id, set()).add(attempt)
    starts = Counter(sandbox_id for sandbox_id, _ in started)
    left: list[str] = []
    deadline = time.monotonic() + 60  # the leader archives each one's logs, then removes it
    while bed.backend == "docker" and time.monotonic() < deadline:
        left = [c.name for c in bed.containers()]
        if not left:
            break
        time.sleep(0.5)
    result = check(Evidence(outboxes, stored, terminal,
                            [f"burst_{n:02d}" for n in range(bed.count)], left, without))
    doubled = sorted(s for s, n in starts.items() if n > 1)
    if doubled:
        result.problems.append(f"{len(doubled)} sandbox(es) started more than once")
    return result, attempts


def assert_ended_once(bed: HaBed, run_id: str, request: pytest.FixtureRequest,
                      broke: str, poller: Poller | None = None) -> Verdict:
    run = bed.wait_run(run_id)
    if poller is not None:
        poller.stop()
    result, attempts = verdict(bed, run_id)
    statuses = [s["status"] for s in run["sandboxes"]]
    record_case(request, f"broke: {broke}; held: {result.sent} events sent, "
                f"{result.stored} stored, each once; {bed.count} sandboxes ended once, none "
                f"started twice" + (f"; the poller saw {poller.answers} answers, "
                                    f"{len(poller.errors)} errors" if poller else "")
                if result.held else "; ".join(result.problems))
    assert result.held, result.problems
    assert run["status"] == "succeeded" and statuses == ["succeeded"] * bed.count, (
        f"{run['status']}: {statuses}\n{bed.output()}")
    assert len(attempts) == bed.count and all(len(a) == 1 for a in attempts.values()), attempts
    if poller is not None:
        assert poller.answers > 0 and poller.errors == [], poller.errors[:5]
    return result


@pytest.mark.parametrize("backend, count", [
    ("process", SANDBOXES),
    pytest.param("docker", 64, marks=pytest.mark.docker, id="docker-64"),
])
def test_leader_kill_9_mid_run_a_standby_leads_and_nothing_is_lost(
    ha: BedFactory, request: pytest.FixtureRequest, backend: str, count: int
) -> None:
    if backend == "docker":
        from tests.docker_support import connect_docker, ensure_sandbox_image

        client = connect_docker()
        ensure_sandbox_image(client)
        client.close()
    bed = ha(count=count, backend=backend)
    run_id = bed.start_run(max_parallel=count)
    poller = Poller(bed.url, run_id)
    poller.start()
    bed.wait_running(run_id, count // 4, timeout_s=300)
    leader = bed.leader()
    standby = next(s for s in bed.reconcilers if s is not leader)
    killed = time.monotonic()
    leader.kill_9()
    while not standby.leading():
        assert time.monotonic() - killed < LEASE_S + 5, (
            f"no new leader within lease + 5 s\n{standby.output()}")
        time.sleep(0.05)
    took = time.monotonic() - killed
    assert standby.metric("simple_leader") == 1
    assert_ended_once(bed, run_id, request, f"kill -9 of the leading reconciler with "
                      f"{count} {backend} sandboxes running; the standby led after "
                      f"{took:.1f} s (lease {LEASE_S:g} s)", poller)


def test_leader_paused_twice_the_lease_acts_on_nothing_after_resuming(
    ha: BedFactory, request: pytest.FixtureRequest
) -> None:
    bed = ha()
    run_id = bed.start_run(max_parallel=SANDBOXES // 2)  # launches go on during the pause
    poller = Poller(bed.url, run_id)
    poller.start()
    bed.wait_running(run_id, SANDBOXES // 4)
    leader = bed.leader()
    standby = next(s for s in bed.reconcilers if s is not leader)
    leader.signal(signal.SIGSTOP)
    try:
        time.sleep(2 * LEASE_S)  # the fault itself: paused for twice the lease
        assert standby.leading(), "the standby took over during the pause"
    finally:
        resumed_at = leader.log.stat().st_size
        leader.signal(signal.SIGCONT)
    deadline = time.monotonic() + 10
    while leader.metric("simple_leader") != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leader.metric("simple_leader") == 0 and standby.metric("simple_leader") == 1
    assert_ended_once(bed, run_id, request, "SIGSTOP of the leading reconciler for "
                      f"{2 * LEASE_S:g} s (twice the lease), then SIGCONT", poller)
    after = leader.log.read_bytes()[resumed_at:].decode(errors="replace")
    acted = [line for line in after.splitlines() if any(word in line for word in ACTS)]
    assert acted == [], f"the resumed old leader acted:\n{acted[:5]}"
    assert "stepped down" in after, after[-2000:]
    assert leader.metric("simple_lease_transitions_total") >= 2  # acquired, then lost


def test_api_replica_killed_while_sandboxes_send_every_event_stored_once(
    ha: BedFactory, request: pytest.FixtureRequest
) -> None:
    bed = ha({**STEADY, "steps": 60, "llm_latency_ms": 150})
    run_id = bed.start_run(max_parallel=SANDBOXES)
    bed.wait_running(run_id, SANDBOXES)
    bed.apis[0].kill_9()
    result = assert_ended_once(bed, run_id, request, f"kill -9 of one of two API replicas "
                               f"while {SANDBOXES} sandboxes sent events through HAProxy")
    assert result.stored == result.sent > SANDBOXES * 60
