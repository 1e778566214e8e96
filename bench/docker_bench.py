"""What SIMPLE adds to Docker itself: no-op sandboxes through SIMPLE vs two bare loops.

Each round runs N no-op sandboxes (default 64) at concurrency C (default 8) three
ways, rotating which goes first:

- SIMPLE: an embedded controller (docker backend, host network, default
  settings), one run of N templates, priority speed, max_parallel C.
- CLI: what a shell script would do: a ThreadPoolExecutor of C workers, each running
  `docker run --rm --network host IMAGE python -c pass` (one docker CLI process per
  container; it returns once the container is removed).
- SDK: the same with the Docker SDK instead of the CLI (no process per container):
  create, start, wait, remove, one client per worker.
`--hardened` adds a fourth: the CLI loop with SIMPLE's container flags (read-only
root, tmpfs, no capabilities, init, limits), to split hardening cost from controller cost.

Clocks:
- makespan, SIMPLE: the run's created_at -> finished_at (controller wall clock; the run
  ends once every container exited, its end was recorded, its log archived and the
  container removed). CLI/SDK: first submit -> last return (time.perf_counter).
- launch -> start: SIMPLE's launched_at (when the reconciler claimed it) or the loop's
  call, -> the engine's `start` event (engine clock, same host).
- exit -> removed: the engine's `die` -> `destroy` events.
- exit -> recorded: the engine's `die` event -> the attempt's recorded_at (stamped after
  the transaction holding its end committed).

The no-op is `python -c pass`: it exits 0 without events or snapshot, so this
measures launch and clean-up overhead only (SIMPLE records each one `succeeded`,
noting that no snapshot came). Everything created carries a label and is removed.
The last line is the verdict: `bench-docker: ... : OK|MISS`.

    python -m bench.docker_bench [--rounds 5] [--sandboxes 64] [--parallel 8] [--hardened]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from bench.support import (
    epoch_seconds,
    median_ms,
    noop_template,
    remove_labelled,
    start_run,
    wait_finished,
    write_catalog,
)
from controller.backends.base import Resources, SandboxSpec
from controller.backends.docker.spec import build_container_spec
from controller.cli.embedded import EmbeddedServer
from controller.db.schema import attempts, sandboxes
from controller.settings import Settings
from sandbox_image.contract import LABEL_RUN_ID, SandboxEnv

IMAGE = "simple-sandbox:latest"
NOOP = ["python", "-c", "pass"]
BENCH_LABEL = "simple.dev/bench"
TARGET_CLI = 1.10
TARGET_SDK = 1.15
TARGET_RECORDED_MS = 100.0
REPO = Path(__file__).resolve().parent.parent
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
    """The engine's client with the sandbox image present (built if missing), or exit
    with one line saying what to do."""
    from docker.client import DockerClient
    from docker.errors import DockerException, ImageNotFound

    try:
        client = DockerClient.from_env(timeout=60)
        client.ping()
    except DockerException as e:
        sys.exit(f"bench-docker: no Docker engine ({e}): start dockerd or set DOCKER_HOST")
    try:
        client.images.get(IMAGE)
    except ImageNotFound:
        print(f"{IMAGE} is missing: building it (make images-sandbox)", flush=True)
        built = subprocess.run(["bash", str(REPO / "docker/build-images.sh"), "sandbox"])
        if built.returncode != 0:
            sys.exit(f"bench-docker: could not build {IMAGE}: run `make images-sandbox`")
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


def write_noop_catalog(directory: Path, n: int) -> list[str]:
    templates = [noop_template(f"noop_{i:03d}", "bench_noop", image=IMAGE, command=NOOP)
                 for i in range(n)]
    return write_catalog(directory, templates)


def simple_round(client: Any, workdir: Path, n: int, parallel: int) -> Round:
    catalog = workdir / "catalog"
    catalog.mkdir()
    ids = write_noop_catalog(catalog, n)
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
            run = wait_finished(server.url, run_id, ROUND_TIMEOUT_S)
            recorded = recorded_times(server.controller.engine, run_id)
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
    result = Round(epoch_seconds(run["finished_at"]) - epoch_seconds(run["created_at"]))
    for sandbox in run["sandboxes"]:
        seen = events.get(sandbox["sandbox_id"], {})
        if "start" in seen and sandbox["launched_at"]:
            result.launch_to_start.append(seen["start"] - epoch_seconds(sandbox["launched_at"]))
        if "die" in seen and "destroy" in seen:
            result.exit_to_removed.append(seen["destroy"] - seen["die"])
        if "die" in seen and sandbox["sandbox_id"] in recorded:
            result.exit_to_recorded.append(recorded[sandbox["sandbox_id"]] - seen["die"])
    return result


def recorded_times(engine: Any, run_id: str) -> dict[str, float]:
    """Per sandbox: when its (last) attempt's end was committed, epoch seconds."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(attempts.c.sandbox_id, attempts.c.recorded_at)
            .join(sandboxes, sandboxes.c.id == attempts.c.sandbox_id)
            .where(sandboxes.c.run_id == run_id, attempts.c.recorded_at.is_not(None))
        ).all()
    return {r.sandbox_id: r.recorded_at.timestamp() for r in rows}


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


def sdk_round(client: Any, n: int, parallel: int) -> Round:
    """The Docker SDK per container: create, start, wait, remove; one client per worker."""
    from docker.client import DockerClient

    token = uuid.uuid4().hex[:10]
    label = f"{BENCH_LABEL}={token}"
    called: dict[str, float] = {}
    local = threading.local()

    def one(index: int) -> None:
        if not hasattr(local, "client"):
            local.client = DockerClient.from_env(timeout=CONTAINER_TIMEOUT_S)
        name = f"bench-{token}-{index:03d}"
        called[name] = time.time()
        container = local.client.containers.create(
            IMAGE, NOOP, name=name, labels={BENCH_LABEL: token}, network_mode="host"
        )
        container.start()
        container.wait(timeout=CONTAINER_TIMEOUT_S)
        container.remove()

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


def run_rounds(
    args: argparse.Namespace, client: Any
) -> Iterator[tuple[int, str, dict[str, Round]]]:
    """Yield each round's results, alternating which side goes first."""
    flags = hardened_flags()
    sides = ["SIMPLE", "CLI", "SDK", *(["hardened"] if args.hardened else [])]

    def measure(side: str, workdir: Path) -> Round:
        if side == "SIMPLE":
            return simple_round(client, workdir, args.sandboxes, args.parallel)
        if side == "SDK":
            return sdk_round(client, args.sandboxes, args.parallel)
        extra = flags if side == "hardened" else []
        return bare_round(client, args.sandboxes, args.parallel, extra)

    for number in range(1, args.rounds + 1):
        shift = (number - 1) % len(sides)  # each side goes first in turn
        order = sides[shift:] + sides[:shift]
        with tempfile.TemporaryDirectory(prefix="simple-docker-bench-") as workdir:
            yield number, order[0], {side: measure(side, Path(workdir)) for side in order}


def print_round(number: int, first: str, results: dict[str, Round]) -> None:
    simple, cli, sdk = results["SIMPLE"], results["CLI"], results["SDK"]
    hardened = results.get("hardened")
    print(
        f"{number:>5} {first:>8} {simple.makespan:>8.2f} s {cli.makespan:>6.2f} s"
        f" {sdk.makespan:>6.2f} s"
        + (f" {hardened.makespan:>8.2f} s" if hardened else "")
        + f" {simple.makespan / cli.makespan:>6.2f} {simple.makespan / sdk.makespan:>6.2f}"
        f"   {median_ms(simple.launch_to_start):>5.0f} / {median_ms(cli.launch_to_start):>4.0f}"
        f" / {median_ms(sdk.launch_to_start):>4.0f} ms"
        f"   {median_ms(simple.exit_to_removed):>5.0f} / {median_ms(cli.exit_to_removed):>4.0f}"
        f" / {median_ms(sdk.exit_to_removed):>4.0f} ms"
        f" {median_ms(simple.exit_to_recorded):>8.0f} ms",
        flush=True,
    )


def print_summary(args: argparse.Namespace, rounds: list[dict[str, Round]]) -> None:
    """Medians over rounds; the last line is the verdict."""
    cli = statistics.median(r["SIMPLE"].makespan / r["CLI"].makespan for r in rounds)
    sdk = statistics.median(r["SIMPLE"].makespan / r["SDK"].makespan for r in rounds)
    recorded = median_ms([x for r in rounds for x in r["SIMPLE"].exit_to_recorded])
    added = [
        (r["SIMPLE"].makespan - r["CLI"].makespan) * args.parallel / args.sandboxes for r in rounds
    ]
    print(f"\nmedian makespan ratio SIMPLE/CLI: {cli:.2f} (target <= {TARGET_CLI})")
    print(f"median makespan ratio SIMPLE/SDK: {sdk:.2f} (target <= {TARGET_SDK})")
    print(
        f"median latency SIMPLE adds per container over the CLI loop: "
        f"{statistics.median(added) * 1000:.0f} ms "
        f"((SIMPLE - CLI makespan) x {args.parallel} / {args.sandboxes})"
    )
    for side in ("SIMPLE", "CLI", "SDK"):
        starts = median_ms([x for r in rounds for x in r[side].launch_to_start])
        removed = median_ms([x for r in rounds for x in r[side].exit_to_removed])
        print(f"{side:>6}: launch -> started {starts:4.0f} ms, exit -> removed {removed:4.0f} ms")
    print(f"exit -> recorded (SIMPLE), median over all containers: {recorded:.0f} ms")
    if args.hardened:
        hardening = statistics.median(r["hardened"].makespan / r["CLI"].makespan for r in rounds)
        print(f"median makespan ratio hardened-CLI/CLI: {hardening:.2f} (the flags by themselves)")
    ok = cli <= TARGET_CLI and sdk <= TARGET_SDK and recorded <= TARGET_RECORDED_MS
    print(
        f"bench-docker: makespan {cli:.2f}x CLI, {sdk:.2f}x SDK, exit->recorded {recorded:.0f} ms "
        f"(target <= {TARGET_CLI}x, <= {TARGET_SDK}x, <= {TARGET_RECORDED_MS:.0f} ms): "
        + ("OK" if ok else "MISS")
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
        f"{args.rounds} rounds; CLI = `docker run --rm --network host`, SDK = docker-py "
        f"create/start/wait/remove, each in a ThreadPoolExecutor({args.parallel}); "
        "medians; see the module docstring for the clocks"
    )
    print(
        f"{'round':>5} {'first':>8} {'SIMPLE':>10} {'CLI':>8} {'SDK':>8}"
        + (f" {'hardened':>10}" if args.hardened else "")
        + f" {'/CLI':>6} {'/SDK':>6}   {'launch->start S/CLI/SDK':>23}"
        f"   {'exit->removed S/CLI/SDK':>23} {'exit->recorded':>14}"
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
