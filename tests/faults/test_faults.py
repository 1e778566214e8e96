# ruff: noqa: F811 - the fixtures imported from tests.services are parameters here
"""The fault suite's Docker cases: break something real while 16 sandboxes emit events,
then prove from their outboxes and the controller's database that nothing was lost,
nothing stored twice, one result per template, no container left. `make faults`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from controller.settings import Settings
from tests.faults.checker import Verdict
from tests.faults.conftest import SANDBOXES, FaultBed, make_bed, record_case
from tests.faults.senders import WAIT_FOR_USR1, outbox_of, senders_for
from tests.services import (  # noqa: F401 - fixtures
    RcloneS3Server,
    S3Server,
    create_database,
    pg_private_server,
    pg_server,
    pg_server_url,
    s3_private_server,
    s3_server,
)

pytestmark = [pytest.mark.faults, pytest.mark.once, pytest.mark.docker, pytest.mark.postgres,
              pytest.mark.s3, pytest.mark.timeout(600)]

# About 40 progress events per sandbox over ~8 s; no checkpoint uploads.
BURST = {"agents": 1, "steps": 40, "llm_latency_ms": 200, "max_concurrency": 1,
         "checkpoint_every_steps": 10_000}
# Overload: a sender per sandbox appends this many events at this rate (tests/faults/senders.py)
OVERLOAD_EVENTS = 2000
OVERLOAD_RATE = 500.0  # events/s per sender
CANCEL_LIMIT_S = 5.0  # every container gone within this after the cancel is acknowledged
LONG = {**BURST, "steps": 600, "llm_latency_ms": 100}  # a minute: to be cancelled

BedFactory = Callable[..., FaultBed]


@pytest.fixture
def bed(settings: Settings, fault_docker: Any, tmp_path: Path) -> Iterator[BedFactory]:
    beds: list[FaultBed] = []

    def make(database_url: str, s3: S3Server, config: dict[str, Any] = BURST,
             command: list[str] | None = None, **env: str) -> FaultBed:
        made = make_bed(settings, database_url, s3, fault_docker, tmp_path, config, command,
                        **env)
        beds.append(made)
        return made

    yield make
    for made in beds:
        made.controller.stop()
        made.remove_containers()


def held(verdict: Verdict) -> str:
    return (f"{verdict.sent} events sent, {verdict.acknowledged} acknowledged, "
            f"{verdict.stored} stored, each once; one terminal result per template; "
            "no container left" if verdict.held else "; ".join(verdict.problems))


def finish(bed: FaultBed, run_id: str, request: pytest.FixtureRequest, broke: str,
           status: str = "succeeded", all_delivered: bool = True,
           senders: Mapping[tuple[str, int], Mapping[str, bool]] | None = None) -> Verdict:
    run = bed.controller.wait_run(run_id)
    verdict = bed.verdict(run_id, all_delivered=all_delivered, senders=senders)
    record_case(request, f"broke: {broke}; held: {held(verdict)}")
    assert verdict.held, verdict.problems
    statuses = [s["status"] for s in run["sandboxes"]]
    assert run["status"] == status and statuses == [status] * SANDBOXES, (
        f"{run['status']}: {statuses}\n{bed.controller.output()}")
    return verdict


def test_kill_9_of_the_controller_mid_run(
    bed: BedFactory, pg_server_url: str, s3_server: S3Server, request: pytest.FixtureRequest
) -> None:
    fault = bed(pg_server_url, s3_server)
    fault.controller.start()
    run_id = fault.controller.start_run()
    fault.controller.wait_running(run_id, SANDBOXES // 2)
    fault.controller.kill_9()
    time.sleep(2)
    fault.controller.start()
    finish(fault, run_id, request, f"kill -9 of the controller with {SANDBOXES} sandboxes "
           "running, then a new one on the same database")


def test_the_controller_away_for_30_s(
    bed: BedFactory, pg_server_url: str, s3_server: S3Server, request: pytest.FixtureRequest
) -> None:
    fault = bed(pg_server_url, s3_server)
    fault.controller.start()
    run_id = fault.controller.start_run()
    fault.controller.wait_running(run_id, SANDBOXES // 2)
    # Frozen, not stopped: the sandboxes' requests hang and time out, they finish and spool
    # their events, and deliver them within their 60 s flush once it answers again.
    fault.controller.freeze(30)
    finish(fault, run_id, request, "the controller frozen (SIGSTOP) for 30 s while the "
           "sandboxes ran and ended")


def test_postgresql_restarted_mid_burst(
    bed: BedFactory, pg_private_server: Any, s3_server: S3Server,
    request: pytest.FixtureRequest
) -> None:
    fault = bed(create_database(pg_private_server.url), s3_server)
    fault.controller.start()
    run_id = fault.controller.start_run()
    fault.controller.wait_running(run_id, SANDBOXES // 2)
    # A fast (clean) stop: this throwaway server runs with fsync=off and
    # synchronous_commit=off, so an immediate stop would lose commits it had already
    # acknowledged -- a property of that server's settings, not of SIMPLE.
    pg_private_server._pg_ctl("stop", "-m", "fast")
    time.sleep(5)
    pg_private_server.start()
    finish(fault, run_id, request, "PostgreSQL stopped mid-burst, back after 5 s")


def test_s3_down_during_uploads_back_after_20_s(
    bed: BedFactory, pg_server_url: str, s3_private_server: RcloneS3Server,
    request: pytest.FixtureRequest
) -> None:
    fault = bed(pg_server_url, s3_private_server)
    fault.controller.start()
    run_id = fault.controller.start_run()
    fault.controller.wait_running(run_id, SANDBOXES // 2)
    s3_private_server.stop()
    time.sleep(20)  # the sandboxes end meanwhile: their snapshot uploads fail and retry
    s3_private_server.start()
    verdict = finish(fault, run_id, request, "the S3 server down while the sandboxes "
                     "uploaded their snapshots, back after 20 s")
    report = httpx.get(f"{fault.controller.url}/v1/runs/{run_id}/report", timeout=30).json()
    assert all(row["error"] is None for row in report["sandboxes"]), report["sandboxes"]
    assert verdict.stored > 0


def test_overload_16_senders_at_500_events_per_s(
    bed: BedFactory, pg_server_url: str, s3_server: S3Server, request: pytest.FixtureRequest,
    tmp_path: Path
) -> None:
    fault = bed(pg_server_url, s3_server, BURST, command=WAIT_FOR_USR1,
                SIMPLE_INGEST_QUEUE_MAX_EVENTS="100")
    fault.controller.start()
    run_id = fault.controller.start_run()
    containers = fault.wait_containers(run_id)
    senders = senders_for(containers, tmp_path, OVERLOAD_EVENTS, OVERLOAD_RATE)
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(timeout_s=400)
    for container in containers:  # every event delivered: the sandboxes may end
        container.kill(signal="SIGUSR1")
    busy = fault.controller.metric("simple_events_rejected_total", code="429")
    rates = sorted(OVERLOAD_EVENTS / s.appended_s for s in senders)
    verdict = finish(fault, run_id, request, f"{SANDBOXES} senders appending "
                     f"{OVERLOAD_EVENTS} events each at {OVERLOAD_RATE:.0f}/s (measured: median "
                     f"{rates[len(rates) // 2]:.0f}/s, slowest {rates[0]:.0f}/s) into a "
                     f"100-event queue ({busy:.0f} answers 429 with Retry-After)",
                     senders={(s.env.sandbox_id, s.env.attempt): outbox_of(s) for s in senders})
    assert busy > 0, "the queue never filled"
    assert verdict.stored == SANDBOXES * (OVERLOAD_EVENTS + 2)  # started, progress, completed
    assert verdict.acknowledged == verdict.stored


def test_cancel_removes_every_container_within_5_s(
    bed: BedFactory, pg_server_url: str, s3_server: S3Server, request: pytest.FixtureRequest
) -> None:
    fault = bed(pg_server_url, s3_server, LONG)
    fault.controller.start()
    run_id = fault.controller.start_run()
    fault.controller.wait_running(run_id)
    time.sleep(1)
    httpx.post(f"{fault.controller.url}/v1/runs/{run_id}/cancel", timeout=30).raise_for_status()
    gone_after = fault.wait_no_containers(run_id, timeout_s=60)
    verdict = finish(fault, run_id, request, f"cancel of {SANDBOXES} running sandboxes: every "
                     f"container gone after {gone_after:.1f} s (limit {CANCEL_LIMIT_S:.0f} s)",
                     status="cancelled", all_delivered=False)
    assert gone_after <= CANCEL_LIMIT_S, f"containers left for {gone_after:.1f} s"
    assert verdict.stored > 0
