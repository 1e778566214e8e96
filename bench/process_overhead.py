"""What the controller adds per sandbox on the process backend, as medians.

Runs the `quick` and `ultra` suites through an embedded controller (priority
speed, real sandbox runtime) and, side by side, a bare baseline that spawns the
same runtime command directly with subprocess at the same concurrency, with a
minimal stdlib HTTP receiver in place of the controller. Prints per suite:

- launch -> `started` event: SIMPLE's (the reconciler claims the sandbox, its
  launched_at -> the `started` event's received_at, both the controller's wall
  clock) and the bare one (just before Popen -> the receiver got the first event,
  the bench's wall clock), and the difference: what SIMPLE adds;
- exit -> aggregated: the supervisor saw the sandbox process end (exit.json's
  finished_at, written by the supervisor) -> the transaction holding its end and
  its snapshot rows committed (the attempt's recorded_at, stamped after the
  commit). The log archive and the clean-up come after, off this path.
Targets: under 100 ms each. The last line is the verdict, `bench: ... : OK|MISS`.

    python -m bench.process_overhead [--rounds N] [--suites quick,ultra]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import select

from bench.support import start_run, wait_finished
from controller.cli.embedded import EmbeddedServer
from controller.db.schema import attempts, events, sandboxes
from controller.settings import Settings

TARGET_MS = 100.0


def simple_round(suite: str, data_dir: Path, parallel: int) -> tuple[list[float], list[float], int]:
    # process_user self: as the bare side, no uid drop (docs/security.md) and no preflight
    settings = Settings(data_dir=data_dir, database_url=f"sqlite:///{data_dir}/simple.db",
                        process_user="self")
    with EmbeddedServer(settings) as server:
        body = {"suites": [suite], "priority": "speed", "max_parallel": parallel}
        run_id = start_run(server.url, body)
        run = wait_finished(server.url, run_id, timeout_s=1800)
        assert run["status"] == "succeeded", run["status"]
        with server.controller.engine.connect() as conn:
            rows = conn.execute(
                select(
                    sandboxes.c.launched_at,
                    events.c.received_at,
                    attempts.c.exited_at,
                    attempts.c.recorded_at,
                )
                .join(attempts, attempts.c.sandbox_id == sandboxes.c.id)
                .join(
                    events, (events.c.sandbox_id == sandboxes.c.id) & (events.c.type == "started")
                )
                .where(sandboxes.c.run_id == run_id)
            ).all()
    starts = [(r.received_at - r.launched_at).total_seconds() for r in rows]
    ends = [
        (r.recorded_at - r.exited_at).total_seconds() for r in rows if r.exited_at and r.recorded_at
    ]
    return starts, ends, len(rows)


class _Receiver(BaseHTTPRequestHandler):
    first_event: ClassVar[dict[str, float]] = {}

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        sandbox = self.path.split("/")[3]
        if any(e["type"] == "started" for e in body["events"]):
            self.first_event.setdefault(sandbox, time.time())
        self._answer(b'{"stored": [], "count": 0}')

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer(b"{}")

    def _answer(self, payload: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *_args: Any) -> None:
        pass


def bare_round(suite: str, data_dir: Path, parallel: int) -> list[float]:
    """Spawn the same runtime for the same templates, same concurrency, no controller."""
    from controller.catalog.templates import load_catalog
    from controller.planning.model import PlanRequest, Priority
    from controller.planning.plan import plan
    from controller.runs import sandbox_spec

    catalog = load_catalog([Settings().builtin_catalog_dir])
    request = PlanRequest(suites=(suite,), priority=Priority.SPEED, max_parallel=parallel)
    the_plan = plan(catalog, request)
    _Receiver.first_event = {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    spawned: dict[str, float] = {}

    def one(index_and_id: tuple[int, str]) -> None:
        index, template_id = index_and_id
        sandbox_id = f"bare-{index}"
        spec = sandbox_spec(catalog.templates[template_id], 0, "unused")
        work = data_dir / sandbox_id
        work.mkdir(parents=True)
        env = {
            "PATH": os.environ["PATH"],
            "SIMPLE_SANDBOX_ID": sandbox_id,
            "SIMPLE_RUN_ID": "run-bare",
            "SIMPLE_TEMPLATE_ID": template_id,
            "SIMPLE_ATTEMPT": "1",
            "SIMPLE_TEMPLATE_CONFIG": json.dumps(spec["config"]),
            "SIMPLE_SEED": str(spec["seed"]),
            "SIMPLE_CONTROLLER_URL": url,
            "SIMPLE_SANDBOX_TOKEN": "t",
            "SIMPLE_SNAPSHOT_URL": f"{url}/snap/{sandbox_id}",
        }
        spawned[sandbox_id] = time.time()
        subprocess.run(
            [sys.executable, "-m", "sandbox_image"],
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=1800,
        )

    with ThreadPoolExecutor(max_workers=the_plan.max_parallel) as pool:
        list(pool.map(one, enumerate(the_plan.selected)))
    httpd.shutdown()
    return [_Receiver.first_event[s] - t for s, t in spawned.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--suites", default="quick,ultra")
    parser.add_argument(
        "--parallel",
        type=int,
        default=2 * (os.cpu_count() or 1),
        help="sandboxes at once, for SIMPLE and the baseline alike (default: 2 per core)",
    )
    args = parser.parse_args()
    ms = 1000.0
    print(
        f"{'suite':<8}{'round':>6}{'n':>5}{'SIMPLE launch->started':>24}"
        f"{'bare spawn->started':>21}{'added':>9}{'exit->aggregated':>18}"
    )
    summary = []
    for suite in args.suites.split(","):
        added_all, end_all = [], []
        for round_no in range(1, args.rounds + 1):
            with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
                # alternate which goes first, so neither always gets the warmer machine
                if round_no % 2:
                    starts, ends, n = simple_round(suite, Path(a), args.parallel)
                    bare = bare_round(suite, Path(b), args.parallel)
                else:
                    bare = bare_round(suite, Path(b), args.parallel)
                    starts, ends, n = simple_round(suite, Path(a), args.parallel)
            s_med, b_med, e_med = (statistics.median(x) * ms for x in (starts, bare, ends))
            added_all.append(s_med - b_med)
            end_all.append(e_med)
            print(
                f"{suite:<8}{round_no:>6}{n:>5}{s_med:>21.1f} ms{b_med:>18.1f} ms"
                f"{s_med - b_med:>6.1f} ms{e_med:>15.1f} ms",
                flush=True,
            )
        summary.append((suite, statistics.median(added_all), statistics.median(end_all)))
    print("\nmedian over rounds (target: under 100 ms per sandbox each):")
    for suite, added, end in summary:
        print(
            f"  {suite:<8} launch->started added {added:7.1f} ms   exit->aggregated {end:7.1f} ms"
        )
    worst_added = max(added for _, added, _ in summary)
    worst_end = max(end for _, _, end in summary)
    ok = worst_added <= TARGET_MS and worst_end <= TARGET_MS
    print(
        f"bench: launch->started adds {worst_added:.0f} ms, exit->aggregated {worst_end:.0f} ms "
        f"(worst suite; target <= {TARGET_MS:.0f} ms each): {'OK' if ok else 'MISS'}"
    )


if __name__ == "__main__":
    main()
