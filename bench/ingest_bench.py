"""Event ingestion under load: the real endpoint against the same endpoint storing nothing.

Starts two controller API processes on loopback over the same PostgreSQL database:
one as in production, one with persistence switched off (the bench installs an event
intake, `AnsweringWithoutStoring`, that answers once the route has parsed and validated
the batch, with no quota and no writer: nothing stored). 64 concurrent
senders, each a sandbox with its own token, POST batches of events as fast as
the answers come back, on keep-alive connections. Rounds alternate between the
two servers; the table shows medians over the rounds of sustained events/s and
of per-request latency (p50, p99), the ratio of the two throughputs, and checks
that every event answered 2xx is stored, once (sent = stored).

    python -m bench.ingest_bench [--senders 64] [--batch 10] [--rounds 5] [--seconds 4]

The database: SIMPLE_BENCH_DATABASE_URL (a scratch database is created on that
server and dropped afterwards), else a durable throwaway server started with
scripts/start-postgres.sh (default settings: fsync on) and stopped at the end.
Targets on a 2-core machine: >= 0.5x the no-persistence throughput, >= 2,000 events/s,
no event lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, func, insert, select, text

from bench.support import free_port
from controller.db.engine import create_db_engine, upgrade
from controller.db.schema import events, runs, sandboxes
from controller.intake.event_batch import EventRequest, accepted, check_batch_ids
from controller.intake.event_intake import EventIntake
from controller.intake.tokens import hash_token

REPO = Path(__file__).resolve().parent.parent
RUN_ID = "run-ingest-bench"
REQUEST_TIMEOUT_S = 30.0


# --- the database -------------------------------------------------------------------------


@contextlib.contextmanager
def bench_database() -> Iterator[str]:
    """A scratch database on SIMPLE_BENCH_DATABASE_URL's server or a throwaway durable one."""
    server_url = os.environ.get("SIMPLE_BENCH_DATABASE_URL")
    cluster = None
    if not server_url:
        cluster = tempfile.mkdtemp(prefix="simple-bench-pg-")
        server_url = subprocess.run(
            [str(REPO / "scripts" / "start-postgres.sh"), "--dir", cluster],
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout.strip()
    name = "bench_" + secrets.token_hex(4)
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    try:
        yield f"{server_url.rpartition('/')[0]}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
        if cluster:
            subprocess.run(
                [str(REPO / "scripts" / "start-postgres.sh"), "--stop", cluster],
                capture_output=True,
                timeout=120,
            )
            subprocess.run(["rm", "-rf", cluster], check=False)


def seed(url: str, senders: int) -> list[tuple[str, str]]:
    """A running run with one running sandbox per sender; their (id, token)."""
    engine = create_db_engine(url)
    upgrade(engine)
    now = datetime.now(UTC)
    tokens = [(f"bench-sbx-{i:03d}", secrets.token_urlsafe(32)) for i in range(senders)]
    with engine.begin() as conn:
        conn.execute(
            insert(runs).values(
                id=RUN_ID,
                status="running",
                backend="process",
                request={},
                plan={},
                max_parallel=senders,
                cancel_requested=False,
                created_at=now,
                started_at=now,
            )
        )
        conn.execute(
            insert(sandboxes),
            [
                {
                    "id": sid,
                    "run_id": RUN_ID,
                    "template_id": "bench",
                    "position": i,
                    "status": "running",
                    "spec": {},
                    "attempt": 1,
                    "token_hash": hash_token(token),
                    "launched_at": now,
                    "last_seq": 0,
                    "cost_usd": 0.0,
                    "prior_cost_usd": 0.0,
                    "expensive": False,
                    "tokens": 0,
                    "aggregated": False,
                }
                for i, (sid, token) in enumerate(tokens)
            ],
        )
    engine.dispose()
    return tokens


def stored_events(url: str) -> tuple[int, dict[str, int]]:
    engine = create_db_engine(url)
    with engine.connect() as conn:
        count = conn.execute(
            select(func.count()).select_from(events).where(events.c.run_id == RUN_ID)
        ).scalar_one()
        last = {
            r.id: r.last_seq
            for r in conn.execute(
                select(sandboxes.c.id, sandboxes.c.last_seq).where(sandboxes.c.run_id == RUN_ID)
            )
        }
    engine.dispose()
    return int(count), last


# --- the servers --------------------------------------------------------------------------


class AnsweringWithoutStoring(EventIntake):
    """The no-persistence server's event intake: each batch answered after the checks that
    need no database; no quota, no writer, nothing stored."""

    async def accept(self, request: EventRequest, attempt: int | None, size: int) -> dict[str, Any]:
        check_batch_ids(request)
        return accepted(request.batch)


def serve(port: int, url: str, persistence: bool) -> None:
    """Child process: the controller's API on `port`, no reconciler (rows are the bench's);
    without `persistence`, the controller's event intake is one that stores nothing."""
    import uvicorn

    from controller.api.app import create_app
    from controller.api.sockets import WS_MAX_BYTES, WS_MAX_QUEUE
    from controller.service import Controller
    from controller.settings import Settings

    with tempfile.TemporaryDirectory(prefix="simple-bench-data-") as data_dir:
        controller = Controller(Settings(data_dir=Path(data_dir), database_url=url))
        if not persistence:
            controller.event_intake = AnsweringWithoutStoring(
                controller.event_writer, controller.event_quota
            )
        app = create_app(controller, manage_lifecycle=False)
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                    ws_max_size=WS_MAX_BYTES, ws_max_queue=WS_MAX_QUEUE)
        controller.close()


@contextlib.contextmanager
def server_process(url: str, persistence: bool, log_dir: Path) -> Iterator[int]:
    port = free_port()
    log = (log_dir / f"server-{port}.log").open("w")
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.ingest_bench",
            "--serve",
            str(port),
            "--database-url",
            url,
            *([] if persistence else ["--no-persistence"]),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {(log_dir / log.name).read_text()}")
            time.sleep(0.05)
        yield port
    finally:
        child.send_signal(signal.SIGINT)  # uvicorn re-raises it: KeyboardInterrupt cleans up
        child.wait(timeout=30)
        log.close()


# --- the load -----------------------------------------------------------------------------


@dataclass
class Sender:
    sandbox_id: str
    token: str
    seq: int = 0
    acked: int = 0  # events answered 2xx by the persisting server, warm-up included


@dataclass
class RoundResult:
    events_per_s: float
    latencies_ms: list[float] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def event_batch(sender: Sender, size: int) -> bytes:
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    items = []
    for _ in range(size):
        sender.seq += 1
        items.append(
            json.dumps(
                {
                    "id": uuid.uuid4().hex,
                    "seq": sender.seq,
                    "type": "progress",
                    "time": now,
                    "data": {
                        "step": sender.seq,
                        "steps_total": 1000000,
                        "cost_usd": sender.seq * 0.01,
                        "tokens": sender.seq * 7,
                        "llm_calls": sender.seq,
                    },
                }
            )
        )
    return ('{"events":[' + ",".join(items) + "]}").encode()


async def send_loop(
    port: int,
    sender: Sender,
    batch: int,
    persistent: bool,
    window: tuple[float, float],
    stop_at: float,
    result: RoundResult,
    counted: list[int],
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST /v1/sandboxes/{sender.sandbox_id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {sender.token}\r\nContent-Type: application/json\r\n"
    )
    try:
        while time.monotonic() < stop_at:
            body = event_batch(sender, batch)
            started = time.monotonic()
            writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            headers = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
            length = next(
                int(line.split(b":")[1])
                for line in headers.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            answer = await asyncio.wait_for(reader.readexactly(length), REQUEST_TIMEOUT_S)
            ended = time.monotonic()
            status = int(headers.split(b" ", 2)[1])
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {answer[:300]!r}")
            if persistent:
                sender.acked += batch
            if window[0] <= ended <= window[1]:
                counted[0] += batch
                result.latencies_ms.append((ended - started) * 1000)
    finally:
        writer.close()


def run_round(
    port: int, senders: list[Sender], batch: int, persistent: bool, warmup_s: float, seconds: float
) -> RoundResult:
    async def main() -> RoundResult:
        start = time.monotonic()
        window = (start + warmup_s, start + warmup_s + seconds)
        result, counted = RoundResult(0.0), [0]
        await asyncio.gather(
            *(
                send_loop(port, s, batch, persistent, window, window[1], result, counted)
                for s in senders
            )
        )
        result.events_per_s = counted[0] / seconds
        return result

    return asyncio.run(main())


# --- the report ---------------------------------------------------------------------------


def summary(results: list[RoundResult]) -> tuple[float, float, float]:
    return (
        statistics.median(r.events_per_s for r in results),
        statistics.median(r.percentile(0.50) for r in results),
        statistics.median(r.percentile(0.99) for r in results),
    )


def report(
    args: argparse.Namespace,
    where: str,
    real: list[RoundResult],
    bare: list[RoundResult],
    acked: int,
    stored: int,
    seq_ok: bool,
) -> bool:
    (real_eps, real_p50, real_p99), (bare_eps, bare_p50, bare_p99) = summary(real), summary(bare)
    ratio = real_eps / bare_eps if bare_eps else 0.0
    print(
        f"\nIngestion: {args.senders} senders x {args.batch} events/request, {args.rounds} "
        f"rounds x {args.seconds:.0f} s (after {args.warmup:.0f} s warm-up), medians; {where}"
    )
    print(f"{'':28}{'events/s':>12}{'p50 ms':>10}{'p99 ms':>10}")
    print(f"{'real endpoint (PostgreSQL)':28}{real_eps:>12,.0f}{real_p50:>10.1f}{real_p99:>10.1f}")
    print(f"{'no persistence':28}{bare_eps:>12,.0f}{bare_p50:>10.1f}{bare_p99:>10.1f}")
    print(
        "per round, events/s: real "
        + ", ".join(f"{r.events_per_s:,.0f}" for r in real)
        + "; no persistence "
        + ", ".join(f"{r.events_per_s:,.0f}" for r in bare)
    )
    lost = acked - stored
    checks = [
        ("throughput ratio real / no persistence", f"{ratio:.2f}", ">= 0.50", ratio >= 0.5),
        ("real endpoint events/s", f"{real_eps:,.0f}", ">= 2,000", real_eps >= 2000),
        (
            "events answered 2xx vs stored",
            f"{acked:,} sent, {stored:,} stored, {lost:,} lost",
            "0 lost",
            lost == 0 and seq_ok,
        ),
    ]
    for name, value, target, ok in checks:
        print(f"{name:40} {value:>34}   target {target:10} {'ok' if ok else 'MISSED'}")
    return all(ok for *_, ok in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument("--batch", type=int, default=10, help="events per request")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per round")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured start of a round")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    parser.add_argument("--no-persistence", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.database_url, not args.no_persistence)
        return 0
    with bench_database() as url, tempfile.TemporaryDirectory() as logs:
        senders = [Sender(sid, token) for sid, token in seed(url, args.senders)]
        real: list[RoundResult] = []
        bare: list[RoundResult] = []
        with (
            server_process(url, True, Path(logs)) as real_port,
            server_process(url, False, Path(logs)) as bare_port,
        ):
            for number in range(args.rounds):
                order = [(True, real_port), (False, bare_port)]
                for persistent, port in order if number % 2 == 0 else order[::-1]:
                    result = run_round(
                        port, senders, args.batch, persistent, args.warmup, args.seconds
                    )
                    (real if persistent else bare).append(result)
        stored, last_seq = stored_events(url)
        acked = sum(s.acked for s in senders)
        # The no-persistence rounds advance seq too, so only check it never goes past ours.
        seq_ok = all(last_seq[s.sandbox_id] <= s.seq for s in senders)
        where = f"PostgreSQL at {url.rpartition('@')[2]}, {os.cpu_count()} CPUs"
        return 0 if report(args, where, real, bare, acked, stored, seq_ok) else 1


if __name__ == "__main__":
    sys.exit(main())
