"""Kubernetes API requests per sandbox lifecycle: the watch-fed cache vs listing per pass.

A kmock API server (tests/k8s/conftest.py's FakeCluster, on loopback) and the
kubernetes backend, driven as the reconciler drives it: N sandboxes (default 2,000),
P in flight (default 100); each pass (every --pass-s, default 0.2 s) observes, archives
the logs of and removes each exited Job, and launches more. The bench plays the
cluster: right after each launch it creates the Job's Pod and moves Pod and Job
through Pending, Running and Succeeded (direct writes to the fake server, which watches
see, not counted). Two modes, one after the other: informers (today's default) and
listing on every observe (the code before informers, `informers=False`).

Clocks: none that matter; the figures are counts of the backend's HTTP requests, from
kmock's request log: LISTs (GET of a collection), WATCHes, creates, log GETs, deletes.
The last line is the verdict: `bench-k8s: ... : OK|MISS`.

    python -m bench.k8s_bench [--sandboxes 2000] [--parallel 100] [--pass-s 0.2]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.support import machine
from controller.backends.base import ObservedState, Resources, SandboxSpec
from controller.backends.kubernetes.backend import KubernetesBackend
from controller.settings import Settings
from sandbox_image.contract import SandboxEnv
from tests.k8s.conftest import FakeCluster, request_kinds

TARGET = 6.0
SLICE_PASSES = 1  # the requests are tallied every this many passes
# kmock matches each request against its whole log: a long log makes the fake's cost
# quadratic and the bench would time kmock, not SIMPLE. The fake keeps only this many
# (every request is still counted, through take_requests).
KMOCK_WINDOW = 16
JOBS, PODS = "batch/v1/jobs", "v1/pods"
DONE = {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": "2026-11-21T12:01:40Z"}}


def spec(index: int, controller_id: str) -> SandboxSpec:
    sandbox_id = f"bench-{index:05d}"
    env = SandboxEnv(sandbox_id=sandbox_id, run_id="run-bench", template_id="noop", attempt=1,
                     template_config={}, seed=0, controller_url="http://controller:8080",
                     sandbox_token="t", snapshot_url="http://store/x")  # fmt: skip
    return SandboxSpec(env, "simple-sandbox:latest", ("true",), 600, Resources("100m", "64Mi"),
                       controller_id=controller_id)  # fmt: skip


def play_cluster(cluster: FakeCluster, name: str) -> None:
    """The Job controller and the kubelet: a Pod, running, then succeeded."""
    pod = cluster.start_pod(name, pod_name=f"{name}-pod")
    cluster.patch(PODS, pod, {"status": {"phase": "Running"}})
    cluster.patch(PODS, pod, {"status": {"phase": "Succeeded", "containerStatuses": [
        {"name": "sandbox", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
         "state": DONE}]}})  # fmt: skip
    cluster.patch(JOBS, name, {"status": {"succeeded": 1, "conditions": [
        {"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-21T12:01:42Z"}]}})
    cluster.logs[pod] = b"ok\n"


def drive(n: int, parallel: int, pass_s: float, informers: bool) -> dict[str, Any]:
    settings = Settings.model_validate(
        {"backend": "kubernetes", "kubernetes_namespace": "sandboxes"}
    )
    cluster = FakeCluster(window=KMOCK_WINDOW)
    batch, core = cluster.apis()
    backend = KubernetesBackend(settings, batch_api=batch, core_api=core, informers=informers)
    launched, done, passes, lists_after_start = 0, 0, 0, 0
    began = time.perf_counter()
    try:
        backend.observe()  # start-up
        counts = request_kinds(cluster.take_requests())
        at_start = counts["list"]
        in_flight: set[str] = set()
        while done < n:
            passes += 1
            if passes % SLICE_PASSES == 0:
                counts = request_kinds(cluster.take_requests(), counts)
            for seen in backend.observe():
                if seen.state == ObservedState.EXITED and seen.sandbox_id in in_flight:
                    backend.read_logs(seen.sandbox_id)
                    backend.remove(seen.sandbox_id)
                    in_flight.discard(seen.sandbox_id)
                    done += 1
            while launched < n and len(in_flight) < parallel:
                one = spec(launched, settings.controller_id)
                backend.launch(one)
                play_cluster(cluster, one.sandbox_id)
                in_flight.add(one.sandbox_id)
                launched += 1
            time.sleep(pass_s)
        counts = request_kinds(cluster.take_requests(), counts)
        lists_after_start = counts["list"] - at_start
    finally:
        backend.close()
        cluster.close()
    total = sum(counts.values())
    return {"counts": counts, "per_sandbox": total / n, "passes": passes,
            "lists_after_start": lists_after_start, "seconds": time.perf_counter() - began}


def show(name: str, result: dict[str, Any]) -> None:
    c = result["counts"]
    print(f"{name:<10} {result['per_sandbox']:6.2f} requests/sandbox   LIST {c['list']:>6} "
          f"(after start-up {result['lists_after_start']}), WATCH {c['watch']}, create "
          f"{c['create']}, log {c['log']}, delete {c['delete']}, other {c['other']}; "
          f"{result['passes']} passes in {result['seconds']:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=2000)
    parser.add_argument("--parallel", type=int, default=100)
    parser.add_argument("--pass-s", type=float, default=0.2)
    args = parser.parse_args()
    print(f"{args.sandboxes} Jobs through their lifecycle on kmock, {args.parallel} in flight, "
          f"a pass every {args.pass_s} s; the backend's requests counted as kmock receives "
          f"them; {machine()}", flush=True)
    informed = drive(args.sandboxes, args.parallel, args.pass_s, informers=True)
    show("informers", informed)
    listing = drive(args.sandboxes, args.parallel, args.pass_s, informers=False)
    show("listing", listing)
    ok = informed["per_sandbox"] <= TARGET and informed["lists_after_start"] == 0
    print(f"bench-k8s: {informed['per_sandbox']:.2f} requests per sandbox lifecycle, "
          f"{informed['lists_after_start']} LISTs after start-up (listing per pass: "
          f"{listing['per_sandbox']:.2f}, {listing['lists_after_start']}) "
          f"(target <= {TARGET:.0f}, 0): {'OK' if ok else 'MISS'}")


if __name__ == "__main__":
    main()
