"""One controller, 1,000 sandboxes: one run of N no-op sandboxes over a database that
already holds 100 finished runs of the same size.

Two sides, one after the other, each on its own copy of the seeded SQLite database:
- instant: a backend whose sandboxes exit 0 the moment they are launched
  (`controller.backends.instant`): the controller alone;
- process: the process backend running a no-op (`python -S -c pass`), beside a bare
  loop spawning the same no-op at the same concurrency (subprocess, no controller).
While a run goes, a client polls `GET /v1/runs/{id}` every 50 ms (the default page: the
first 100 sandboxes and the counts over all of them), another the whole run
(`?limit=1000`) every second, and the report is fetched at the end. The clients run in a
process of their own, as real ones do: this process is the controller (API server,
reconciler, exit path), and its RSS and CPU are the controller's alone.

Clocks and figures:
- controller RSS: peak VmRSS of this process, sampled every 50 ms;
- reconcile pass: the reconciler's own duration of each pass (time.perf_counter);
- GET /v1/runs/{id}: client-side latency of each poll, p99 (the whole-run page printed
  beside it);
- CPU: this process's CPU time over the side, start-up (catalog, plan) included; per
  sandbox, / N (a figure the load of a shared machine does not inflate as much as
  wall-clock ones);
- overhead per sandbox: (SIMPLE makespan - bare makespan) / N on the process backend,
  makespan / N on the instant one (nothing to subtract); SIMPLE's makespan is the run's
  created_at -> finished_at (the controller's wall clock), the bare one perf_counter.
Each figure is taken per round (instant side, process side, bare loop) and the verdict
on its median over the rounds (5 by default; the peak RSS on its maximum). The last line
is the verdict: `bench-scale: ... : OK|MISS`.

    python -m bench.scale_bench [--sandboxes 1000] [--runs 100] [--parallel 16] [--rounds 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert

from bench.support import FINAL, NOOP, noop_template, p99_ms, start_run, write_catalog
from controller.backends.instant import InstantBackend
from controller.catalog.templates import load_catalog
from controller.cli.embedded import EmbeddedServer
from controller.db.engine import create_db_engine, upgrade
from controller.db.schema import attempts, result_runs, runs, sandboxes
from controller.planning.model import PlanRequest, Priority
from controller.planning.plan import plan
from controller.runs import sandbox_id_for, sandbox_spec
from controller.settings import Settings

SUITE = "scale"
SPAWN = multiprocessing.get_context("spawn")  # not fork: this process runs threads
TARGETS = {"rss_mb": 300.0, "pass_p99_ms": 50.0, "get_p99_ms": 100.0, "overhead_ms": 20.0}


def write_scale_catalog(directory: Path, n: int) -> None:
    templates = [noop_template(f"noop_{i:04d}", "bench_scale", mechanisms=["M1"])
                 for i in range(n)]
    write_catalog(directory, templates, suites={SUITE: [t["id"] for t in templates]},
                  name="scale.yaml")


def seed(path: Path | str, catalog_dir: Path, runs_count: int) -> None:
    """`runs_count` finished runs of the suite, with attempts and result rows, in the
    SQLite file `path` (or the database at URL `path`)."""
    catalog = load_catalog([catalog_dir])
    the_plan = plan(catalog, PlanRequest(suites=(SUITE,), priority=Priority.SPEED))
    engine = create_db_engine(path if isinstance(path, str) else f"sqlite:///{path}")
    upgrade(engine)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        for number in range(runs_count):
            run_id = f"run-{number:08x}"
            conn.execute(insert(runs).values(
                id=run_id, status="succeeded", backend="process", request={"suites": [SUITE]},
                plan=the_plan.to_dict(), max_parallel=the_plan.max_parallel,
                cancel_requested=False, created_at=now, started_at=now, finished_at=now,
            ))  # fmt: skip
            ids = [sandbox_id_for(run_id, t, i) for i, t in enumerate(the_plan.selected)]
            conn.execute(insert(sandboxes), [
                {"id": sid, "run_id": run_id, "template_id": t, "position": i,
                 "status": "succeeded", "spec": sandbox_spec(catalog.templates[t], 0, "x"),
                 "attempt": 1, "exit_code": 0, "launched_at": now, "started_at": now,
                 "finished_at": now, "last_seq": 3, "cost_usd": 0.5, "prior_cost_usd": 0.0,
                 "tokens": 100, "aggregated": True, "expensive": False}
                for i, (sid, t) in enumerate(zip(ids, the_plan.selected, strict=True))
            ])  # fmt: skip
            conn.execute(insert(attempts), [
                {"sandbox_id": sid, "attempt": 1, "status": "succeeded", "exit_code": 0,
                 "cost_usd": 0.5, "started_at": now, "exited_at": now, "finished_at": now,
                 "recorded_at": now}
                for sid in ids
            ])  # fmt: skip
            conn.execute(insert(result_runs), [
                {"sandbox_id": sid, "snapshot_run_id": sid, "run_id": run_id, "template_id": t,
                 "status": "completed", "cost_usd": 0.5, "tokens_used": 100, "llm_calls": 3,
                 "entities_created": 1, "timepoints_created": 1, "mechanisms_used": '["M1"]'}
                for sid, t in zip(ids, the_plan.selected, strict=True)
            ])  # fmt: skip
    engine.dispose()


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Poller(threading.Thread):
    """GETs the run every `every_s`, timing each answer, until the run ends."""

    def __init__(self, url: str, run_id: str, every_s: float,
                 params: dict[str, int] | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.run_id, self.every_s, self.params = url, run_id, every_s, params
        self.latencies: list[float] = []
        self.last: dict[str, Any] = {}
        self.done = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.done.is_set():
                began = time.perf_counter()
                response = client.get(f"{self.url}/v1/runs/{self.run_id}", params=self.params)
                self.latencies.append(time.perf_counter() - began)
                self.last = response.raise_for_status().json()
                if self.last["status"] in FINAL:
                    return
                self.done.wait(self.every_s)


def clients(url: str, pipe: Connection) -> None:
    """The clients' process: says it is ready; told the run's id, GETs the default page
    every 50 ms and the whole run every second until the run ends; answers (latencies,
    whole-run latencies, the run)."""
    pipe.send("ready")
    run_id = pipe.recv()
    page = Poller(url, run_id, every_s=0.05)
    whole = Poller(url, run_id, every_s=1.0, params={"limit": 1000})
    page.start()
    whole.start()
    page.join()
    whole.done.set()
    whole.join()
    pipe.send((page.latencies, whole.latencies, page.last))


class PeakRss(threading.Thread):
    """This process's peak VmRSS, sampled every 50 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = rss_mb()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            self.peak = max(self.peak, rss_mb())


def simple_side(workdir: Path, db: Path, catalog: Path, parallel: int, instant: bool) -> dict:
    shutil.copy(db, workdir / "simple.db")
    settings = Settings(
        data_dir=workdir / "data",
        database_url=f"sqlite:///{workdir}/simple.db",
        catalog_dirs=[catalog],
        max_attempts=1,
        process_user="self",  # as the bare side: no uid drop (docs/security.md), no preflight
    )
    backend = InstantBackend() if instant else None
    cpu = time.process_time()
    rss = PeakRss()
    rss.start()
    with EmbeddedServer(settings, backend=backend) as server:
        mine, theirs = multiprocessing.Pipe()
        polling = SPAWN.Process(target=clients, args=(server.url, theirs))
        polling.start()
        mine.recv()  # ready (its imports done): it waits for the run's id
        body = {"suites": [SUITE], "priority": "speed", "max_parallel": parallel}
        run_id = start_run(server.url, body)
        mine.send(run_id)
        latencies, whole, run = mine.recv()
        polling.join()
        began = time.perf_counter()
        httpx.get(f"{server.url}/v1/runs/{run_id}/report", timeout=60).raise_for_status()
        report_s = time.perf_counter() - began
        passes = list(server.controller.reconciler.pass_seconds)
    cpu = time.process_time() - cpu
    rss.done.set()
    if run["status"] != "succeeded":
        raise RuntimeError(f"run {run_id} ended {run['status']}: {run['sandbox_counts']}")
    ended, created = (datetime.fromisoformat(run[k]) for k in ("finished_at", "created_at"))
    return {
        "makespan": (ended - created).total_seconds(),
        "rss_mb": rss.peak,
        "pass_p99_ms": p99_ms(passes),
        "pass_median_ms": statistics.median(passes) * 1000,
        "passes": len(passes),
        "get_p99_ms": p99_ms(latencies),
        "get_median_ms": statistics.median(latencies) * 1000,
        "whole_p99_ms": p99_ms(whole),
        "report_ms": report_s * 1000,
        "cpu_s": cpu,
    }


def bare_side(n: int, parallel: int) -> float:
    """The same no-op spawned n times, `parallel` at once, with no controller."""
    from concurrent.futures import ThreadPoolExecutor

    command = [sys.executable, *NOOP[1:]]
    began = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(lambda _: subprocess.run(command, check=True, timeout=60), range(n)))
    return time.perf_counter() - began


def show(name: str, side: dict[str, Any]) -> None:
    print(
        f"{name:<9} makespan {side['makespan']:7.2f} s   peak RSS {side['rss_mb']:5.0f} MB   "
        f"pass median/p99 {side['pass_median_ms']:5.1f}/{side['pass_p99_ms']:5.1f} ms "
        f"({side['passes']} passes)   GET run median/p99 {side['get_median_ms']:5.1f}/"
        f"{side['get_p99_ms']:5.1f} ms (whole run p99 {side['whole_p99_ms']:5.1f} ms)   "
        f"report {side['report_ms']:5.0f} ms   "
        f"CPU {side['cpu_s']:5.1f} s",
        flush=True,
    )


def one_round(root: Path, number: int, n: int, parallel: int) -> dict[str, float]:
    """Instant side, process side, bare loop; this round's figures."""
    work = root / f"round-{number}"
    (work / "instant").mkdir(parents=True)
    (work / "process").mkdir()
    instant = simple_side(work / "instant", root / "seed.db", root / "catalog", parallel,
                          instant=True)  # fmt: skip
    show("instant", instant)
    process = simple_side(work / "process", root / "seed.db", root / "catalog", parallel,
                          instant=False)  # fmt: skip
    show("process", process)
    bare = bare_side(n, parallel)
    overhead = (process["makespan"] - bare) / n * 1000
    print(
        f"bare      makespan {bare:7.2f} s   (the no-op spawned {n} times, no controller); "
        f"controller overhead per sandbox: process {overhead:.1f} ms ((SIMPLE - bare) / {n}), "
        f"instant {instant['makespan'] / n * 1000:.1f} ms (makespan / {n})",
        flush=True,
    )
    shutil.rmtree(work)
    return {
        "rss_mb": max(instant["rss_mb"], process["rss_mb"]),
        "pass_p99_ms": max(instant["pass_p99_ms"], process["pass_p99_ms"]),
        "get_p99_ms": max(instant["get_p99_ms"], process["get_p99_ms"]),
        "overhead_ms": overhead,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=100, help="finished runs already in the DB")
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n = args.sandboxes
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="simple-scale-bench-") as tmp:
        root = Path(tmp)
        write_scale_catalog(root / "catalog", n)
        began = time.perf_counter()
        seed(root / "seed.db", root / "catalog", args.runs)
        print(
            f"{n} no-op sandboxes in one run, max_parallel {args.parallel}, over a SQLite "
            f"database holding {args.runs} finished runs of {n} (seeded in "
            f"{time.perf_counter() - began:.0f} s); {args.rounds} rounds, each the instant "
            "side, the process side and the bare loop; the verdict takes each figure's "
            "median over the rounds (the peak RSS: its maximum)",
            flush=True,
        )
        for number in range(1, args.rounds + 1):
            print(f"-- round {number}", flush=True)
            rounds.append(one_round(root, number, n, args.parallel))
    figures = {k: statistics.median(r[k] for r in rounds) for k in TARGETS}
    figures["rss_mb"] = max(r["rss_mb"] for r in rounds)
    ok = all(figures[k] <= TARGETS[k] for k in TARGETS)
    for key, label in (("pass_p99_ms", "pass p99"), ("get_p99_ms", "GET run p99"),
                       ("overhead_ms", "overhead")):  # fmt: skip
        print(f"{label:<12} per round: " + ", ".join(f"{r[key]:.1f}" for r in rounds) + " ms")
    print(
        f"bench-scale: RSS {figures['rss_mb']:.0f} MB, pass p99 {figures['pass_p99_ms']:.1f} ms, "
        f"GET run p99 {figures['get_p99_ms']:.1f} ms, overhead {figures['overhead_ms']:.1f} "
        f"ms/sandbox (medians of {len(rounds)} rounds; target <= 300 MB, 50 ms, 100 ms, "
        f"20 ms): {'OK' if ok else 'MISS'}"
    )


if __name__ == "__main__":
    main()
