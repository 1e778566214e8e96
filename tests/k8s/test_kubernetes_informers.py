"""The kubernetes backend's watch-fed cache against kmock: observe reads the cache (one
LIST per kind at start, none after), changes arrive by watch, logs come from the cached
pod with one GET, and two controllers in one namespace see only their own Jobs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from controller.backends.base import ObservedState
from controller.backends.kubernetes.backend import KubernetesBackend
from controller.settings import Settings
from tests.e2e_helpers import wait_for
from tests.k8s.conftest import FakeCluster, MakeSpec, request_kinds
from tests.k8s.test_kubernetes_backend import JOBS, PODS, container

Make = Callable[[Settings], KubernetesBackend]


@pytest.fixture
def make_backend(cluster: FakeCluster) -> Iterator[Make]:
    made: list[KubernetesBackend] = []

    def build(settings: Settings) -> KubernetesBackend:
        batch, core = cluster.apis()
        backend = KubernetesBackend(settings, batch_api=batch, core_api=core)
        made.append(backend)
        return backend

    yield build
    for backend in made:
        backend.close()


def state_of(backend: KubernetesBackend, sandbox_id: str) -> Any:
    return next((o.state for o in backend.observe() if o.sandbox_id == sandbox_id), None)


def test_a_lifecycle_is_followed_by_watch_without_listing(
    cluster: FakeCluster, k8s_settings: Settings, make_spec: MakeSpec, make_backend: Make
) -> None:
    backend = make_backend(k8s_settings)
    assert backend.observe() == []  # starts the informers: one LIST per kind
    backend.launch(make_spec("sbx-w"))
    wait_for(lambda: state_of(backend, "sbx-w") == ObservedState.PENDING, 20, "the Job")
    pod = cluster.start_pod("sbx-w")
    cluster.patch(PODS, pod, {"status": {"phase": "Running", "containerStatuses": container(
        {"running": {"startedAt": "2026-11-21T12:00:05Z"}}, ready=True)}})
    wait_for(lambda: state_of(backend, "sbx-w") == ObservedState.RUNNING, 20, "running")
    cluster.patch(PODS, pod, {"status": {"phase": "Succeeded", "containerStatuses": container(
        {"terminated": {"exitCode": 0, "reason": "Completed",
                        "finishedAt": "2026-11-21T12:01:40Z"}})}})
    cluster.patch(JOBS, "sbx-w", {"status": {"succeeded": 1, "conditions": [
        {"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-21T12:01:42Z"}]}})
    wait_for(lambda: state_of(backend, "sbx-w") == ObservedState.EXITED, 20, "the exit")
    cluster.logs[pod] = b"done\n"
    assert backend.read_logs("sbx-w") == b"done\n"
    backend.remove("sbx-w")
    for _ in range(20):  # a reconciler's passes
        backend.observe()
    counts = request_kinds(cluster.requests())
    assert counts["list"] == 2, f"one LIST per kind at start, none per pass: {counts}"
    assert counts["watch"] >= 2
    # create: the Job and its Secret; delete: both (the Secret also goes with its Job)
    assert (counts["create"], counts["log"], counts["delete"]) == (2, 1, 2), counts


def test_two_controllers_in_one_namespace_stay_apart(
    cluster: FakeCluster, k8s_settings: Settings, make_spec: MakeSpec, make_backend: Make
) -> None:
    other_settings = k8s_settings.model_copy(
        update={"database_url": "postgresql+psycopg://simple@other-db/simple"})
    assert other_settings.controller_id != k8s_settings.controller_id
    mine, theirs = make_backend(k8s_settings), make_backend(other_settings)
    mine.launch(make_spec("sbx-mine"))
    spec = make_spec("sbx-theirs")
    from dataclasses import replace
    theirs.launch(replace(spec, controller_id=other_settings.controller_id))
    wait_for(lambda: [o.sandbox_id for o in mine.observe()] == ["sbx-mine"], 20, "mine")
    wait_for(lambda: [o.sandbox_id for o in theirs.observe()] == ["sbx-theirs"], 20, "theirs")
