"""The API apart from the reconciler: one run of N no-op sandboxes on the process backend
and PostgreSQL, once with one `--role all` process and once with `--role api` beside
`--role reconciler`, the figures side by side.

Each side gets a fresh database seeded with `--runs` finished runs of N, and its own data
directory. A client (a thread of this process, which runs no controller) polls
`GET /v1/runs/{id}` every 50 ms while the run goes; the reconciler's pass median and p99
come from its own `/metrics` (`simple_reconcile_pass_quantile_seconds`) once the run has
ended. With one process the API, the passes and the exit path share one GIL; split, the
API replica serves alone.

    python -m bench.ha_bench [--sandboxes 1000] [--runs 20] [--parallel 16]

PostgreSQL: SIMPLE_TEST_DATABASE_URL's server, else one started here
(scripts/start-postgres.sh's binaries).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.scale_bench import SUITE, seed, write_scale_catalog
from bench.support import FINAL, free_port, p99_ms, serve_argv, wait_healthy
from controller.db.engine import create_db_engine, upgrade
from tests.services import create_database, drop_database, start_postgres_server


def serve(role: str, port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(serve_argv("--role", role, "--port", str(port)),
                                stdout=out, stderr=subprocess.STDOUT, env=env)


def pass_quantiles(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    page = httpx.get(f"{url}/metrics", timeout=30).text
    return {s.labels["quantile"]: s.value * 1000 for f in text_string_to_metric_families(page)
            for s in f.samples if s.name == "simple_reconcile_pass_quantile_seconds"}


def poll(url: str, run_id: str) -> tuple[list[float], dict[str, Any]]:
    latencies: list[float] = []
    run: dict[str, Any] = {}
    with httpx.Client(timeout=30) as client:
        while run.get("status") not in FINAL:
            began = time.perf_counter()
            run = client.get(f"{url}/v1/runs/{run_id}").raise_for_status().json()
            latencies.append(time.perf_counter() - began)
            time.sleep(0.05)
    return latencies, run


def side(split: bool, server_url: str, root: Path, catalog: Path, runs: int,
         parallel: int) -> dict[str, Any]:
    name = "split" if split else "one"
    url = create_database(server_url)
    engine = create_db_engine(url)
    upgrade(engine)
    engine.dispose()
    seed(url, catalog, runs)
    api_port, rec_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    env.update(SIMPLE_DATABASE_URL=url, SIMPLE_DATA_DIR=str(root / name),
               SIMPLE_CATALOG_DIRS=str(catalog), SIMPLE_MAX_ATTEMPTS="1",
               SIMPLE_PROCESS_USER="self", SIMPLE_CONTROLLER_URL=f"http://127.0.0.1:{api_port}",
               SIMPLE_LEASE_DURATION_S="3", SIMPLE_LEASE_RENEW_DEADLINE_S="2",
               SIMPLE_LEASE_RETRY_S="0.5")
    processes = []
    try:
        api = serve("api" if split else "all", api_port, env, root / f"{name}-api.log")
        processes.append(api)
        api_url = f"http://127.0.0.1:{api_port}"
        wait_healthy(api_url, api, timeout_s=120, path="/readyz")
        passes_url = api_url
        if split:
            reconciler = serve("reconciler", rec_port, env, root / f"{name}-rec.log")
            processes.append(reconciler)
            passes_url = f"http://127.0.0.1:{rec_port}"
            wait_healthy(passes_url, reconciler, timeout_s=120, path="/readyz")
        made = httpx.post(f"{api_url}/v1/runs", json={"suites": [SUITE], "priority": "speed",
                                                       "max_parallel": parallel}, timeout=60)
        run_id = made.raise_for_status().json()["run_id"]
        latencies, run = poll(api_url, run_id)
        quantiles = pass_quantiles(passes_url)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        drop_database(server_url, url)
    if run["status"] != "succeeded":
        raise RuntimeError(f"{name}: run {run_id} ended {run['status']}")
    return {"get_median_ms": statistics.median(latencies) * 1000, "get_p99_ms": p99_ms(latencies),
            "gets": len(latencies), "pass_median_ms": quantiles.get("0.5", float("nan")),
            "pass_p99_ms": quantiles.get("0.99", float("nan"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=20, help="finished runs already in the DB")
    parser.add_argument("--parallel", type=int, default=16)
    args = parser.parse_args()
    started = None
    server_url = os.environ.get("SIMPLE_TEST_DATABASE_URL", "")
    if not server_url.startswith("postgresql"):
        started = start_postgres_server()
        server_url = started.url
    try:
        with tempfile.TemporaryDirectory(prefix="simple-ha-bench-") as tmp:
            root = Path(tmp)
            write_scale_catalog(root / "catalog", args.sandboxes)
            figures = {split: side(split, server_url, root, root / "catalog", args.runs,
                                   args.parallel) for split in (False, True)}
    finally:
        if started is not None:
            started.remove()
    print(f"{args.sandboxes} no-op sandboxes, process backend, PostgreSQL, max_parallel "
          f"{args.parallel}, {args.runs} finished runs in the database")
    print(f"{'':<34}{'one process':>14}{'api | reconciler':>20}")
    for key, label in (("get_median_ms", "GET /v1/runs/{id} median (ms)"),
                       ("get_p99_ms", "GET /v1/runs/{id} p99 (ms)"),
                       ("pass_median_ms", "reconcile pass median (ms)"),
                       ("pass_p99_ms", "reconcile pass p99 (ms)")):
        print(f"{label:<34}{figures[False][key]:>14.1f}{figures[True][key]:>20.1f}")


if __name__ == "__main__":
    main()
