"""How close SIMPLE's launch order keeps a run to the shortest possible makespan.

The `ultra` suite (64 templates), each replaced by a sandbox that sleeps for its
catalog runtime estimate (the midpoint of `runtime_s`) times `--scale` (default
0.01: 900 s of estimate become 9 s), run on the process backend with priority
`speed` and max_parallel 8. The lower bound of any schedule is
max(longest sleep, total sleep / 8). Two ways, alternating which goes first:

- LPT: the bench catalog carries the real estimates, so the planner launches the
  longest first (`controller.planning.sizing.longest_first`);
- listed: every estimate the same, so the planner keeps the suite's listed order
  (what a launcher without estimates does).

Also printed, simulated (pure list scheduling over the same sleeps, no sandbox
run): the default priority `balanced` as planned today, whose expensive templates
run one at a time, so its makespan is at least their sum.

Clocks: makespan is the run's created_at -> finished_at (the controller's wall
clock): it includes launching, recording and cleaning up every sandbox.
The last line is the verdict: `bench-schedule: ... : OK|MISS`.

    python -m bench.schedule_bench [--rounds 3] [--scale 0.01] [--parallel 8]
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.support import noop_template, start_run, wait_finished, write_catalog
from controller.catalog.templates import Catalog, load_catalog
from controller.cli.embedded import EmbeddedServer
from controller.planning.model import PlanRequest
from controller.planning.plan import plan
from controller.settings import Settings

SUITE = "ultra"
TARGET = 1.10


def sleeps(catalog: Catalog, scale: float) -> dict[str, float]:
    """Each template's sleep: its runtime estimate's midpoint, scaled."""
    return {
        t: round(sum(catalog.templates[t].runtime_s) / 2 * scale, 3) for t in catalog.suite(SUITE)
    }


def write_sleep_catalog(directory: Path, catalog: Catalog, sleep: dict[str, float],
                        real: bool) -> None:
    """One template per `sleep` entry sleeping that long, estimated as the built-in one
    (`real`) or all alike (60 s), so only the estimates can order the launches."""
    write_catalog(directory, [
        noop_template(template_id, "bench_schedule", timeout_s=600,
                      estimate={"cost_usd": [0.0, 0.0], "runtime_s": (
                          list(catalog.templates[template_id].runtime_s) if real else [60, 60])},
                      command=["python", "-S", "-c", f"import time; time.sleep({seconds})"])
        for template_id, seconds in sleep.items()
    ])


def measure(workdir: Path, catalog: Catalog, sleep: dict[str, float], real: bool, p: int) -> float:
    write_sleep_catalog(workdir / "catalog", catalog, sleep, real)
    settings = Settings(
        data_dir=workdir / "data",
        database_url=f"sqlite:///{workdir}/simple.db",
        catalog_dirs=[workdir / "catalog"],
        max_attempts=1,
        process_user="self",  # as the bare side: no uid drop (docs/security.md), no preflight
    )
    with EmbeddedServer(settings) as server:
        body = {"templates": list(sleep), "priority": "speed", "max_parallel": p}
        run: dict[str, Any] = wait_finished(server.url, start_run(server.url, body), 1800)
    if run["status"] != "succeeded":
        raise RuntimeError(f"run {run['run_id']} ended {run['status']}")
    ended = datetime.fromisoformat(run["finished_at"])
    return (ended - datetime.fromisoformat(run["created_at"])).total_seconds()


def simulate(order: list[str], sleep: dict[str, float], slots: int, serial: set[str]) -> float:
    """List scheduling in launch order, as the reconciler does; `serial` run one at a time."""
    clock, running, waiting = 0.0, [], list(order)
    while waiting or running:
        busy_serial = any(t in serial for _, t in running)
        for t in list(waiting):
            if len(running) >= slots:
                break
            if t in serial and busy_serial:
                continue
            heapq.heappush(running, (clock + sleep[t], t))
            busy_serial = busy_serial or t in serial
            waiting.remove(t)
        clock, _ = heapq.heappop(running)
        while running and running[0][0] <= clock:
            heapq.heappop(running)
    return clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=0.01)
    parser.add_argument("--parallel", type=int, default=8)
    args = parser.parse_args()
    catalog = load_catalog([Settings().builtin_catalog_dir])
    sleep = sleeps(catalog, args.scale)
    bound = max(max(sleep.values()), sum(sleep.values()) / args.parallel)
    print(
        f"{SUITE}: {len(sleep)} sandboxes sleeping their runtime estimate x {args.scale} "
        f"({min(sleep.values()):.2f}-{max(sleep.values()):.2f} s, {sum(sleep.values()):.0f} s "
        f"in all), process backend, priority speed, max_parallel {args.parallel}; lower bound "
        f"max(longest, total / {args.parallel}) = {bound:.2f} s; machine shared and loaded"
    )
    print(
        f"{'round':>5} {'first':>7} {'LPT':>9} {'listed':>9} {'LPT/bound':>10} {'listed/bound':>13}"
    )
    results: dict[str, list[float]] = {"LPT": [], "listed": []}
    for number in range(1, args.rounds + 1):
        order = ["LPT", "listed"] if number % 2 else ["listed", "LPT"]
        for side in order:
            with tempfile.TemporaryDirectory(prefix="simple-schedule-bench-") as workdir:
                real = side == "LPT"
                results[side].append(measure(Path(workdir), catalog, sleep, real, args.parallel))
        lpt, listed = results["LPT"][-1], results["listed"][-1]
        print(
            f"{number:>5} {order[0]:>7} {lpt:>7.2f} s {listed:>7.2f} s {lpt / bound:>10.3f}"
            f" {listed / bound:>13.3f}",
            flush=True,
        )
    balanced = plan(catalog, PlanRequest(suites=(SUITE,), max_parallel=args.parallel))
    simulated = simulate(list(balanced.selected), sleep, args.parallel, set(balanced.expensive))
    lpt = statistics.median(results["LPT"])
    listed = statistics.median(results["listed"])
    print(
        f"\nmedian makespan: LPT {lpt:.2f} s ({lpt / bound:.3f} x bound), listed order "
        f"{listed:.2f} s ({listed / bound:.3f} x bound)"
    )
    print(
        f"simulated, priority balanced (today's default; its {len(balanced.expensive)} expensive "
        f"templates one at a time): {simulated:.2f} s ({simulated / bound:.2f} x bound)"
    )
    ok = lpt <= TARGET * bound
    print(
        f"bench-schedule: makespan {lpt / bound:.3f} x lower bound with LPT, "
        f"{listed / bound:.3f} x in listed order (target <= {TARGET}): {'OK' if ok else 'MISS'}"
    )


if __name__ == "__main__":
    main()
