"""What SIMPLE adds to Docker itself: no-op sandboxes through SIMPLE vs a bare `docker run` loop.

Each round runs N no-op sandboxes (default 64) at concurrency C (default 8) two
ways, alternating which goes first:

- SIMPLE: an embedded controller (docker backend, host network, default
  settings), one run of N templates, priority speed, max_parallel C. Makespan:
  the run's created_at -> finished_at (every container exited, its log archived,
  its end recorded and the container removed).
- bare: what a script would do: a ThreadPoolExecutor of C workers, each running
  `docker run --rm --network host IMAGE python -c pass` with the docker CLI (it
  returns once the container is removed). Makespan: first submit -> last return.
  `--hardened` adds a third variant: the same loop with SIMPLE's container flags
  (read-only root, tmpfs, no capabilities, init, limits), to split hardening cost
  from controller cost.

The no-op is `python -c pass`: it exits 0 without events or snapshot, so this
measures launch and clean-up overhead only (SIMPLE records each one `succeeded`,
noting that no snapshot came). Per container, from the engine's own events:
launch -> start (SIMPLE: the reconciler's launched_at; bare: the CLI call) and
exit -> removed. Everything created carries a label and is removed at the end.

    python bench/docker_bench.py [--rounds 5] [--sandboxes 64] [--parallel 8] [--hardened]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.backends.base import Resources, SandboxSpec
from controller.backends.docker_spec import build_container_spec
from controller.cli.embedded import EmbeddedServer
from controller.settings import Settings
from sandbox_image.contract import LABEL_RUN_ID, SandboxEnv
from tests.e2e_helpers import start_run

IMAGE = "simple-sandbox:latest"
NOOP = ["python", "-c", "pass"]
BENCH_LABEL = "simple.dev/bench"
TARGET_RATIO = 1.15
ROUND_TIMEOUT_S = 600.0
CONTAINER_TIMEOUT_S = 120.0


@dataclass
class Round:
    """One side of one round: its makespan and per-container latencies (seconds)."""

    makespan: float
    launch_to_start: list[float] = field(default_factory=list)
    exit_to_removed: list[float] = field(default_factory=list)
    exit_to_recorded: list[float] = field(default_factory=list)


def docker_client() -> Any:
    from docker.client import DockerClient

    client = DockerClient.from_env(timeout=60)
    client.ping()
    client.images.get(IMAGE)  # ImageNotFound: build it with `make images`
    return client


def container_events(client: Any, label: str, since: float) -> dict[str, dict[str, float]]:
    """Per container name: the epoch time of its create, start, die and destroy events."""
    seen: dict[str, dict[str, float]] = {}
    for event in client.events(
        since=int(since) - 1,
        until=int(time.time()) + 1,
        decode=True,
        filters={"type": "container", "label": label},
    ):
        name = event.get("Actor", {}).get("Attributes", {}).get("name")
        if name and event.get("status") in ("create", "start", "die", "destroy"):
            seen.setdefault(name, {})[event["status"]] = event["timeNano"] / 1e9
    return seen


def remove_labelled(client: Any, label: str) -> int:
    """Force-remove every container carrying `label`; how many there were."""
    from docker.errors import APIError, NotFound

    leftovers = client.containers.list(all=True, ignore_removed=True, filters={"label": label})
    for container in leftovers:
        with contextlib.suppress(NotFound, APIError):
            container.remove(force=True)
    return len(leftovers)


def write_catalog(directory: Path, n: int) -> list[str]:
    ids = [f"noop_{i:03d}" for i in range(n)]
    templates = [
        {
            "id": template_id,
            "category": "bench_noop",
            "estimate": {"cost_usd": [0.0, 0.0], "runtime_s": [1, 1]},
            "timeout_s": 300,
            "image": IMAGE,
            "command": NOOP,
        }
        for template_id in ids
    ]
    (directory / "bench.yaml").write_text(yaml.safe_dump({"templates": templates}))
    return ids


def _seconds(iso: str) -> float:
    """Epoch seconds of an API time (UTC, with or without an offset)."""
    moment = datetime.fromisoformat(iso)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def simple_round(client: Any, workdir: Path, n: int, parallel: int) -> Round:
    catalog = workdir / "catalog"
    catalog.mkdir()
    ids = write_catalog(catalog, n)
    settings = Settings(
        data_dir=workdir / "data",
        database_url=f"sqlite:///{workdir}/simple.db",
        backend="docker",
        docker_network="host",
        catalog_dirs=[catalog],
        max_attempts=1,
    )
    since = time.time()
    with EmbeddedServer(settings) as server:
        body = {"templates": ids, "priority": "speed", "max_parallel": parallel}
        run_id = start_run(server.url, body)
        try:
            run = wait_finished(server.url, run_id)
        finally:
            remove_labelled(client, f"{LABEL_RUN_ID}={run_id}")
    if run["status"] != "succeeded":
        failed = [s for s in run["sandboxes"] if s["status"] != "succeeded"]
        raise RuntimeError(
            f"SIMPLE run {run_id} ended {run['status']}: "
            + "; ".join(f"{s['sandbox_id']} {s['status']}: {s['error']}" for s in failed[:3])
            + " (`lost` sandboxes: another SIMPLE controller on this engine may have removed "
            "them; run the bench alone)"
        )
    events = container_events(client, f"{LABEL_RUN_ID}={run_id}", since)
    result = Round(_seconds(run["finished_at"]) - _seconds(run["created_at"]))
    for sandbox in run["sandboxes"]:
        seen = events.get(sandbox["sandbox_id"], {})
        if "start" in seen and sandbox["launched_at"]:
            result.launch_to_start.append(seen["start"] - _seconds(sandbox["launched_at"]))
        if "die" in seen and "destroy" in seen:
            result.exit_to_removed.append(seen["destroy"] - seen["die"])
        if "die" in seen and sandbox["finished_at"]:
            result.exit_to_recorded.append(_seconds(sandbox["finished_at"]) - seen["die"])
    return result


def wait_finished(url: str, run_id: str) -> dict[str, Any]:
    """Poll gently (a busy poller would steal CPU from the controller)."""
    deadline = time.monotonic() + ROUND_TIMEOUT_S
    while time.monotonic() < deadline:
        run = httpx.get(f"{url}/v1/runs/{run_id}", timeout=30).json()
        if run["status"] not in ("pending", "running"):
            return dict(run)
        time.sleep(0.25)
    raise TimeoutError(f"run {run_id} did not finish within {ROUND_TIMEOUT_S:.0f} s")


def hardened_flags() -> list[str]:
    """SIMPLE's container flags (build_container_spec) as `docker run` options."""
    unused = "http://127.0.0.1:9"
    env = SandboxEnv(
        sandbox_id="x", run_id="x", template_id="x", attempt=1, template_config={}, seed=0,
        controller_url=unused, sandbox_token="t", snapshot_url=unused,
    )  # fmt: skip
    spec = SandboxSpec(env, IMAGE, tuple(NOOP), 300, Resources(cpu="1", memory="512Mi"))
    kwargs = build_container_spec(spec, network="host")
    flags = ["--user", kwargs["user"], "--workdir", kwargs["working_dir"], "--read-only"]
    for path, options in kwargs["tmpfs"].items():
        flags += ["--tmpfs", f"{path}:{options}"]
    for cap in kwargs["cap_drop"]:
        flags += ["--cap-drop", cap]
    for option in kwargs["security_opt"]:
        flags += ["--security-opt", option]
    flags += ["--init", "--pids-limit", str(kwargs["pids_limit"])]
    flags += ["--memory", f"{kwargs['mem_limit']}b", "--memory-swap", f"{kwargs['memswap_limit']}b"]
    return [*flags, "--cpus", str(kwargs["nano_cpus"] / 1e9)]


def bare_round(client: Any, n: int, parallel: int, extra_flags: list[str]) -> Round:
    token = uuid.uuid4().hex[:10]
    label = f"{BENCH_LABEL}={token}"
    called: dict[str, float] = {}

    def one(index: int) -> None:
        name = f"bench-{token}-{index:03d}"
        called[name] = time.time()
        subprocess.run(
            ["docker", "run", "--rm", "--network", "host", "--label", label, "--name", name,
             *extra_flags, IMAGE, *NOOP],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            check=True, timeout=CONTAINER_TIMEOUT_S,
        )  # fmt: skip

    since = time.time()
    began = time.perf_counter()
    try:
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            list(pool.map(one, range(n)))
        result = Round(time.perf_counter() - began)
    finally:
        remove_labelled(client, label)
    events = container_events(client, label, since)
    for name, at in called.items():
        seen = events.get(name, {})
        if "start" in seen:
            result.launch_to_start.append(seen["start"] - at)
        if "die" in seen and "destroy" in seen:
            result.exit_to_removed.append(seen["destroy"] - seen["die"])
    return result


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def run_rounds(
    args: argparse.Namespace, client: Any
) -> Iterator[tuple[int, str, dict[str, Round]]]:
    """Yield each round's results, alternating which side goes first."""
    flags = hardened_flags()
    sides = ["SIMPLE", "bare", *(["hardened"] if args.hardened else [])]

    def measure(side: str, workdir: Path) -> Round:
        if side == "SIMPLE":
            return simple_round(client, workdir, args.sandboxes, args.parallel)
        extra = flags if side == "hardened" else []
        return bare_round(client, args.sandboxes, args.parallel, extra)

    for number in range(1, args.rounds + 1):
        order = sides if number % 2 else sides[::-1]
        with tempfile.TemporaryDirectory(prefix="simple-docker-bench-") as workdir:
            yield number, order[0], {side: measure(side, Path(workdir)) for side in order}


def print_round(number: int, first: str, results: dict[str, Round]) -> float:
    simple, bare = results["SIMPLE"], results["bare"]
    ratio = simple.makespan / bare.makespan
    hardened = results.get("hardened")
    print(
        f"{number:>5} {first:>7} {simple.makespan:>9.2f} s {bare.makespan:>7.2f} s"
        + (f" {hardened.makespan:>9.2f} s" if hardened else "")
        + f" {ratio:>6.2f}   {median_ms(simple.launch_to_start):>7.0f} ms"
        f" {median_ms(bare.launch_to_start):>7.0f} ms"
        f" {median_ms(simple.exit_to_removed):>7.0f} ms {median_ms(bare.exit_to_removed):>7.0f} ms"
        f" {median_ms(simple.exit_to_recorded):>8.0f} ms",
        flush=True,
    )
    return ratio


def print_summary(args: argparse.Namespace, rounds: list[dict[str, Round]]) -> None:
    ratios = [r["SIMPLE"].makespan / r["bare"].makespan for r in rounds]
    added = [
        (r["SIMPLE"].makespan - r["bare"].makespan) * args.parallel / args.sandboxes for r in rounds
    ]
    verdict = "meets" if statistics.median(ratios) <= TARGET_RATIO else "MISSES"
    every = [x for r in rounds for x in r["SIMPLE"].launch_to_start]
    bare_every = [x for r in rounds for x in r["bare"].launch_to_start]
    print(
        f"\nmedian makespan ratio SIMPLE/bare: {statistics.median(ratios):.2f} "
        f"(target <= {TARGET_RATIO}: {verdict} it)"
    )
    print(
        f"median latency SIMPLE adds per container: {statistics.median(added) * 1000:.0f} ms "
        f"((SIMPLE - bare makespan) x {args.parallel} / {args.sandboxes})"
    )
    print(
        f"launch -> container started, median over all containers: SIMPLE "
        f"{median_ms(every):.0f} ms, bare {median_ms(bare_every):.0f} ms"
    )
    if args.hardened:
        hardening = [r["hardened"].makespan / r["bare"].makespan for r in rounds]
        print(
            f"median makespan ratio hardened-bare/bare: {statistics.median(hardening):.2f} "
            "(what SIMPLE's container flags cost by themselves)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sandboxes", type=int, default=64)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument(
        "--hardened",
        action="store_true",
        help="also time the bare loop with SIMPLE's container flags",
    )
    args = parser.parse_args()
    client = docker_client()
    print(
        f"{args.sandboxes} no-op sandboxes (`{' '.join(NOOP)}` in {IMAGE}: exits 0, no events, "
        f"no snapshot; launch and clean-up overhead only), {args.parallel} at once, "
        f"{args.rounds} rounds; bare = docker CLI `docker run --rm --network host` in a "
        f"ThreadPoolExecutor({args.parallel})"
    )
    print(
        f"{'round':>5} {'first':>7} {'SIMPLE':>11} {'bare':>9}"
        + (f" {'hardened':>11}" if args.hardened else "")
        + f" {'ratio':>6}   {'launch->start SIMPLE / bare':>27}"
        f" {'exit->removed SIMPLE / bare':>27} {'exit->recorded':>14}"
    )
    results = []
    try:
        for number, first, round_results in run_rounds(args, client):
            print_round(number, first, round_results)
            results.append(round_results)
    finally:
        remove_labelled(client, BENCH_LABEL)
        client.close()
    print_summary(args, results)


if __name__ == "__main__":
    main()
