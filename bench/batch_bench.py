"""Batch execution: 100 tiny no-op items as 100 one-item sandboxes vs batches of 10 and 100.

The seed's claim (003, "Sandbox Batch Execution Optimization"): a sandbox per tiny
item costs a start each; passing the items to one sandbox that loops over them costs
one start plus milliseconds per item, about 10x faster. Each round runs the same
100 items (the built-in evaluator: every item passes, nothing else happens) three
ways on each backend, rotating which layout goes first:

- per-item: batch_size 1, 100 sandboxes;
- batch-10: batch_size 10, 10 sandboxes;
- batch-100: batch_size 100, 1 sandbox;

all at the same max_parallel (default 8), through an embedded controller per backend
and round (process backend, local store; docker backend, host network, local store).
Makespan: the run's created_at -> finished_at (every item's result aggregated).
Printed: per layout and backend the median makespan, per-item time (makespan / items),
and the ratio per-item / batched. Last line: `bench-batch: ... : OK|MISS` (target:
batch-100 at least 10x faster than per-item on Docker). No timed assertions.

    python -m bench.batch_bench [--rounds 3] [--items 100] [--parallel 8]
                                [--backends process,docker]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import httpx

from bench.support import (
    epoch_seconds,
    noop_template,
    remove_labelled,
    start_run,
    wait_finished,
    write_catalog,
)
from controller.cli.embedded import EmbeddedServer
from controller.settings import Settings
from sandbox_image.contract import LABEL_RUN_ID

LAYOUTS = {"per-item": 1, "batch-10": 10, "batch-100": 100}
TARGET_DOCKER_RATIO = 10.0
ROUND_TIMEOUT_S = 900.0


def write_items_catalog(directory: Path, items: int) -> None:
    template = noop_template("noop_eval", "bench_batch", items_file="items.jsonl",
                             resources={"cpu": "1", "memory": "256Mi"},
                             estimate={"cost_usd": [0.0, 0.0], "runtime_s": [0.01, 0.01]})
    del template["command"]  # the built-in evaluator: every item passes
    write_catalog(directory, [template],
                  items=({"item_id": f"item-{i:04d}", "data": {"n": i}} for i in range(items)))


def remove_containers(run_id: str) -> None:
    """Whatever a docker run left (normally nothing), found by its run-id label."""
    from docker.client import DockerClient

    client = DockerClient.from_env(timeout=60)
    remove_labelled(client, f"{LABEL_RUN_ID}={run_id}")
    client.close()


def one_round(backend: str, workdir: Path, order: list[str], items: int,
              parallel: int) -> dict[str, float]:
    """Each layout once on one controller; makespans in seconds by layout."""
    catalog = workdir / "catalog"
    write_items_catalog(catalog, items)
    settings = Settings(data_dir=workdir / "data", database_url=f"sqlite:///{workdir}/s.db",
                        process_user="self",
                        backend=backend, docker_network="host", catalog_dirs=[catalog],
                        max_attempts=1)
    makespans: dict[str, float] = {}
    with EmbeddedServer(settings) as server:
        for layout in order:
            body = {"templates": ["noop_eval"], "batch_size": LAYOUTS[layout],
                    "max_parallel": parallel, "priority": "speed"}
            run_id = start_run(server.url, body)
            try:
                run = wait_finished(server.url, run_id, ROUND_TIMEOUT_S)
            finally:
                if backend == "docker":
                    remove_containers(run_id)
            report = httpx.get(f"{server.url}/v1/runs/{run_id}/report", timeout=60).json()
            done = report["totals"]["items"]["passed"]
            if run["status"] != "succeeded" or done != items:
                raise RuntimeError(f"{backend} {layout}: run {run_id} ended {run['status']} "
                                   f"with {done}/{items} items passed")
            makespans[layout] = epoch_seconds(run["finished_at"]) - epoch_seconds(run["created_at"])
            print(f"  {backend:8} {layout:10} {makespans[layout]:7.2f} s", flush=True)
    return makespans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--backends", default="process,docker")
    args = parser.parse_args()
    backends = args.backends.split(",")
    results: dict[str, dict[str, list[float]]] = {b: {k: [] for k in LAYOUTS} for b in backends}
    names = list(LAYOUTS)
    for round_no in range(args.rounds):
        order = names[round_no % 3:] + names[:round_no % 3]
        print(f"round {round_no + 1}/{args.rounds}: order {', '.join(order)}", flush=True)
        for backend in backends if round_no % 2 == 0 else backends[::-1]:
            with tempfile.TemporaryDirectory(prefix="simple-batch-bench-") as tmp:
                for layout, seconds in one_round(backend, Path(tmp), order, args.items,
                                                 args.parallel).items():
                    results[backend][layout].append(seconds)
    report(results, args)


def report(results: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> None:
    print(f"\n{args.items} no-op items, max_parallel {args.parallel}, median of "
          f"{args.rounds} rounds")
    print(f"{'backend':8} {'layout':10} {'sandboxes':>9} {'makespan s':>10} "
          f"{'per item ms':>11} {'per-item / this':>15}")
    verdict = []
    for backend, layouts in results.items():
        base = statistics.median(layouts["per-item"])
        for layout, times in layouts.items():
            median = statistics.median(times)
            sandboxes = -(-args.items // LAYOUTS[layout])
            print(f"{backend:8} {layout:10} {sandboxes:9d} {median:10.2f} "
                  f"{1000 * median / args.items:11.1f} {base / median:14.1f}x")
        ratio = base / statistics.median(layouts["batch-100"])
        overhead = (base - statistics.median(layouts["batch-100"])) / args.items
        print(f"{backend:8} overhead of a sandbox per item: {1000 * overhead:.0f} ms per item")
        if backend == "docker":
            verdict.append(f"docker per-item/batch-100 {ratio:.1f}x (target >= "
                           f"{TARGET_DOCKER_RATIO:.0f}x)")
            ok = ratio >= TARGET_DOCKER_RATIO
    if verdict:
        print(f"bench-batch: {'; '.join(verdict)}: {'OK' if ok else 'MISS'}")


if __name__ == "__main__":
    main()
