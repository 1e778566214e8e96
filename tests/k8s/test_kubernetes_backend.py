"""The kubernetes backend against a fake API server (kmock) and fake API objects.

kmock plays the API server; the tests play the Job controller and the kubelet by
creating Pods and patching in statuses. Fake API objects and a fake sleeper test the
retry policy without waiting. No cluster is contacted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from controller.backends.base import ObservedState
from controller.backends.kubernetes.backend import (
    MANAGED_SELECTOR,
    REQUIRED_RBAC,
    KubernetesApiError,
    KubernetesBackend,
)
from controller.errors import BackendError, NotFoundError, UnavailableError
from controller.settings import Settings
from tests.k8s.conftest import NAMESPACE, REPO_ROOT, FakeCluster, MakeSpec, import_tool

T0 = 1_795_262_400.0  # 2026-11-21T12:00:00Z, the pods' creation time in these tests
JOBS = "batch/v1/jobs"
PODS = "v1/pods"


class FakeSleeper:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def sleeper() -> FakeSleeper:
    return FakeSleeper()


@pytest.fixture
def backend(cluster: FakeCluster, k8s_settings: Settings,
            sleeper: FakeSleeper) -> Iterator[KubernetesBackend]:
    batch, core = cluster.apis()
    # Listing on each observe: these tests read right after each change they make; the
    # watch-fed cache (the default) is tested in test_kubernetes_informers.py.
    made = KubernetesBackend(k8s_settings, batch_api=batch, core_api=core, clock=lambda: T0,
                             sleeper=sleeper, jitter=lambda: 1.0, unschedulable_grace_s=120,
                             informers=False)
    yield made
    made.close()  # its watches, before the fake API server stops


def container(state: dict[str, Any], ready: bool = False) -> list[dict[str, Any]]:
    """The containerStatuses a kubelet reports for the sandbox container."""
    return [{"name": "sandbox", "image": "simple-sandbox:latest", "imageID": "", "ready": ready,
             "restartCount": 0, "state": state}]


def only(backend: KubernetesBackend) -> Any:
    observed = backend.observe()
    assert len(observed) == 1, observed
    return observed[0]


# -- create, list, delete ---------------------------------------------------------------


def test_launch_creates_the_rendered_job(backend: KubernetesBackend, cluster: FakeCluster,
                                         make_spec: MakeSpec) -> None:
    spec = make_spec("sbx-create")
    backend.launch(spec)
    job = cluster.job("sbx-create")
    assert job["metadata"].pop("uid")  # the API server's
    assert job == backend.render(spec)
    posts = [r for r in cluster.requests() if r.method == "POST"]
    assert [r.url.path for r in posts] == [f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
                                           f"/api/v1/namespaces/{NAMESPACE}/secrets"]


def test_observe_finds_jobs_by_the_managed_by_label(backend: KubernetesBackend,
                                                    cluster: FakeCluster,
                                                    make_spec: MakeSpec) -> None:
    backend.launch(make_spec("sbx-mine", run_id="run-7", attempt=2))
    cluster.put(JOBS, {"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": "someone-elses", "namespace": NAMESPACE,
                                    "labels": {"app": "other"}}})
    seen = only(backend)
    assert (seen.sandbox_id, seen.run_id, seen.attempt) == ("sbx-mine", "run-7", 2)
    assert seen.state == ObservedState.PENDING
    lists = [r for r in cluster.requests() if r.method == "GET" and r.name is None]
    assert {r.params["labelSelector"] for r in lists} == {backend.selector}
    assert backend.selector.startswith(MANAGED_SELECTOR + ",simple.dev/controller=")
    assert {r.resource.plural for r in lists} == {"jobs", "pods"}


def test_a_new_backend_adopts_running_jobs(cluster: FakeCluster, k8s_settings: Settings,
                                           backend: KubernetesBackend,
                                           make_spec: MakeSpec) -> None:
    backend.launch(make_spec("sbx-before-restart"))
    batch, core = cluster.apis()
    restarted = KubernetesBackend(k8s_settings, batch_api=batch, core_api=core)
    try:
        assert [o.sandbox_id for o in restarted.observe()] == ["sbx-before-restart"]
    finally:
        restarted.close()  # its watches, before the fake API server stops


def test_stop_and_remove_delete_in_background_and_are_idempotent(
    backend: KubernetesBackend, cluster: FakeCluster, make_spec: MakeSpec
) -> None:
    backend.launch(make_spec("sbx-stop"))
    backend.stop("sbx-stop")
    assert not cluster.has_job("sbx-stop")
    backend.stop("sbx-stop")
    backend.remove("sbx-stop")
    deletes = [r for r in cluster.requests() if r.method == "DELETE"]
    assert len(deletes) == 6  # the Job and its Secret, three times
    assert {r.url.path for r in deletes} == {
        f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/sbx-stop",
        f"/api/v1/namespaces/{NAMESPACE}/secrets/sbx-stop-env"}
    assert {r.params["propagationPolicy"] for r in deletes} == {"Background"}
    assert backend.observe() == []


def test_launching_the_same_attempt_again_adopts_it(backend: KubernetesBackend,
                                                    cluster: FakeCluster,
                                                    make_spec: MakeSpec) -> None:
    backend.launch(make_spec("sbx-twice"))
    backend.launch(make_spec("sbx-twice"))
    assert only(backend).attempt == 1
    deletes = [r.resource.plural for r in cluster.requests() if r.method == "DELETE"]
    assert deletes == ["secrets"]  # the Secret is replaced (it is immutable), the Job kept


def test_a_retry_replaces_the_earlier_attempts_job(backend: KubernetesBackend,
                                                   cluster: FakeCluster,
                                                   make_spec: MakeSpec) -> None:
    backend.launch(make_spec("sbx-retry", attempt=1))
    backend.launch(make_spec("sbx-retry", attempt=2))
    assert only(backend).attempt == 2
    assert cluster.job("sbx-retry")["metadata"]["labels"]["simple.dev/attempt"] == "2"


# -- status mapping: the cluster's part is played by patching statuses ------------------


def test_pending_running_then_complete(backend: KubernetesBackend, cluster: FakeCluster,
                                       make_spec: MakeSpec) -> None:
    backend.launch(make_spec("sbx-ok"))
    assert only(backend).state == ObservedState.PENDING  # no pod yet
    pod = cluster.start_pod("sbx-ok")
    assert only(backend).state == ObservedState.PENDING
    cluster.patch(PODS, pod, {"status": {"phase": "Running", "containerStatuses": container(
        {"running": {"startedAt": "2026-11-21T12:00:05Z"}}, ready=True)}})
    assert only(backend).state == ObservedState.RUNNING
    cluster.patch(PODS, pod, {"status": {"phase": "Succeeded", "containerStatuses": container(
        {"terminated": {"exitCode": 0, "reason": "Completed",
                        "finishedAt": "2026-11-21T12:01:40Z"}})}})
    cluster.patch(JOBS, "sbx-ok", {"status": {"succeeded": 1, "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True"},
        {"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-21T12:01:42Z"}]}})
    seen = only(backend)
    assert (seen.state, seen.exit_code, seen.oom_killed, seen.deadline_exceeded) == (
        ObservedState.EXITED, 0, False, False)
    assert seen.exited_at == T0 + 100  # the container's finish, not the condition's


def _terminate(cluster: FakeCluster, job: str, pod: str, exit_code: int, reason: str,
               job_reason: str = "BackoffLimitExceeded") -> None:
    cluster.patch(PODS, pod, {"status": {"phase": "Failed", "containerStatuses": container(
        {"terminated": {"exitCode": exit_code, "reason": reason}})}})
    cluster.patch(JOBS, job, {"status": {"failed": 1, "conditions": [
        {"type": "FailureTarget", "status": "True", "reason": job_reason},
        {"type": "Failed", "status": "True", "reason": job_reason,
         "lastTransitionTime": "2026-11-21T12:00:30Z",
         "message": "Job has reached the specified backoff limit"}]}})


def test_failed_reports_the_exit_code(backend: KubernetesBackend, cluster: FakeCluster,
                                      make_spec: MakeSpec) -> None:
    backend.launch(make_spec("sbx-fail"))
    _terminate(cluster, "sbx-fail", cluster.start_pod("sbx-fail"), 3, "Error")
    seen = only(backend)
    assert (seen.state, seen.exit_code, seen.oom_killed, seen.reason) == (
        ObservedState.EXITED, 3, False, None)
    assert seen.exited_at == T0 + 30  # no finishedAt: when the Job failed


def test_oom_killed(backend: KubernetesBackend, cluster: FakeCluster,
                    make_spec: MakeSpec) -> None:
    backend.launch(make_spec("sbx-oom"))
    _terminate(cluster, "sbx-oom", cluster.start_pod("sbx-oom"), 137, "OOMKilled")
    seen = only(backend)
    assert (seen.state, seen.exit_code, seen.oom_killed) == (ObservedState.EXITED, 137, True)


def test_deadline_exceeded(backend: KubernetesBackend, cluster: FakeCluster,
                           make_spec: MakeSpec) -> None:
    backend.launch(make_spec("sbx-slow"))
    _terminate(cluster, "sbx-slow", cluster.start_pod("sbx-slow"), 143, "Error",
               job_reason="DeadlineExceeded")
    seen = only(backend)
    assert (seen.state, seen.deadline_exceeded, seen.oom_killed) == (
        ObservedState.EXITED, True, False)


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "ErrImagePull", "InvalidImageName"])
def test_image_pull_failures_end_with_a_reason_and_hint(
    backend: KubernetesBackend, cluster: FakeCluster, make_spec: MakeSpec, reason: str
) -> None:
    backend.launch(make_spec("sbx-pull", image="nope/missing:1"))
    cluster.start_pod("sbx-pull", containerStatuses=container({"waiting": {
        "reason": reason, "message": 'Back-off pulling image "nope/missing:1"'}}))
    seen = only(backend)
    assert seen.state == ObservedState.EXITED
    assert seen.exit_code is None
    assert seen.reason.startswith(f'{reason}: Back-off pulling image "nope/missing:1"')
    assert "(hint: check the template's image name" in seen.reason


def test_unschedulable_ends_only_after_the_grace(cluster: FakeCluster, k8s_settings: Settings,
                                                 make_spec: MakeSpec,
                                                 request: pytest.FixtureRequest) -> None:
    now = [T0 + 60]
    batch, core = cluster.apis()
    backend = KubernetesBackend(k8s_settings, batch_api=batch, core_api=core,
                                clock=lambda: now[0], unschedulable_grace_s=120)
    request.addfinalizer(backend.close)  # its watches, before the fake API server stops
    backend.launch(make_spec("sbx-big", cpu="64"))
    cluster.start_pod("sbx-big", conditions=[{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "lastTransitionTime": "2026-11-21T12:00:00Z",
        "message": "0/3 nodes are available: 3 Insufficient cpu."}])
    assert only(backend).state == ObservedState.PENDING
    now[0] = T0 + 120
    seen = only(backend)
    assert seen.state == ObservedState.EXITED
    assert seen.reason.startswith("Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.")
    assert "hint:" in seen.reason


def test_a_disrupted_pods_successor_is_followed(backend: KubernetesBackend,
                                               cluster: FakeCluster,
                                               make_spec: MakeSpec) -> None:
    backend.launch(make_spec("sbx-drain"))
    first = cluster.start_pod("sbx-drain", "sbx-drain-aaaaa", created="2026-11-21T12:00:00Z")
    cluster.patch(PODS, first, {"status": {"phase": "Failed", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}})
    second = cluster.start_pod("sbx-drain", "sbx-drain-bbbbb", created="2026-11-21T12:05:00Z")
    cluster.patch(PODS, second, {"status": {"phase": "Running"}})
    assert only(backend).state == ObservedState.RUNNING


# -- logs -------------------------------------------------------------------------------


def test_read_logs_returns_the_pods_bytes_verbatim(backend: KubernetesBackend,
                                                  cluster: FakeCluster,
                                                  make_spec: MakeSpec) -> None:
    backend.launch(make_spec("sbx-logs"))
    pod = cluster.start_pod("sbx-logs")
    assert backend.read_logs("sbx-logs") == b""  # container still starting: 400 from the API
    cluster.logs[pod] = b'{"step": 1}\n\xe2\x9c\x93 done\n'  # JSON-looking and UTF-8
    assert backend.read_logs("sbx-logs") == b'{"step": 1}\n\xe2\x9c\x93 done\n'
    log_reads = [r for r in cluster.requests() if r.subresource == "log"]
    assert {(r.name, r.params["container"]) for r in log_reads} == {(pod, "sandbox")}


def test_logs_are_read_under_the_log_budget(cluster: FakeCluster, k8s_settings: Settings,
                                            make_spec: MakeSpec) -> None:
    """Issue 25 finding 1: the API is asked for at most four budgets (limitBytes) and what
    comes is kept as head and tail, the middle counted, a chunk at a time."""
    batch, core = cluster.apis()
    budget = 64 * 1024
    settings = k8s_settings.model_copy(update={"log_budget": budget})
    small = KubernetesBackend(settings, batch_api=batch, core_api=core, clock=lambda: T0,
                              informers=False)
    try:
        small.launch(make_spec("sbx-flood"))
        pod = cluster.start_pod("sbx-flood")
        flood = b"START\n" + b"x" * 200_000 + b"\nEND\n"
        cluster.logs[pod] = flood
        view = small.open_logs("sbx-flood")
        kept = b"".join(view.chunks)
        assert view.dropped > 0 and len(kept) <= budget + 100
        assert kept.startswith(b"START\n") and kept.endswith(b"\nEND\n")
        assert b"[\xe2\x80\xa6 %d bytes dropped by SIMPLE's log budget" % view.dropped in kept
        reads = [r for r in cluster.requests() if r.subresource == "log"]
        assert {r.params.get("limitBytes") for r in reads} == {str(4 * budget)}
    finally:
        small.close()


def test_read_logs_of_a_gone_sandbox_is_not_found(backend: KubernetesBackend) -> None:
    with pytest.raises(NotFoundError):
        backend.read_logs("sbx-never")


# -- API errors: only 429 and 5xx are retried -------------------------------------------


def test_a_403_raises_at_once_with_the_rbac_hint(backend: KubernetesBackend,
                                                 cluster: FakeCluster, sleeper: FakeSleeper,
                                                 make_spec: MakeSpec) -> None:
    kmock = import_tool("kmock", "kmock")
    cluster.fail(("post", kmock.resource(JOBS)), 403,
                 'jobs.batch is forbidden: User "system:serviceaccount:simple:simple" cannot '
                 'create resource "jobs" in API group "batch"', times=1)
    with pytest.raises(BackendError) as info:
        backend.launch(make_spec("sbx-403"))
    assert "the controller's ServiceAccount needs `create` on `jobs`" in (info.value.hint or "")
    assert "Forbidden" in info.value.message and info.value.transient is False
    from kubernetes.client.exceptions import ApiException

    assert isinstance(info.value.__cause__, ApiException)
    assert sleeper.delays == []
    assert len([r for r in cluster.requests() if r.method == "POST"]) == 1


def test_a_5xx_is_retried_and_a_create_that_landed_is_adopted(
    backend: KubernetesBackend, cluster: FakeCluster, sleeper: FakeSleeper,
    make_spec: MakeSpec,
) -> None:
    kmock = import_tool("kmock", "kmock")
    # The emulator stores the Job before answering 503, like an API server whose answer
    # was lost: the retry meets 409 and finds its own attempt.
    cluster.fail(("post", kmock.resource(JOBS)), 503, "etcdserver: leader changed", times=1)
    backend.launch(make_spec("sbx-flaky"))
    assert len(sleeper.delays) == 1
    assert only(backend).sandbox_id == "sbx-flaky"


def test_a_429_honours_retry_after(backend: KubernetesBackend, cluster: FakeCluster,
                                   sleeper: FakeSleeper) -> None:
    kmock = import_tool("kmock", "kmock")
    cluster.fail(("list", kmock.resource(JOBS)), 429, "too many requests", times=2,
                 headers={"Retry-After": "3"})
    assert backend.observe() == []
    assert sleeper.delays == [3.0, 3.0]


def test_quota_exhaustion_is_transient_not_rbac(backend: KubernetesBackend,
                                                cluster: FakeCluster,
                                                make_spec: MakeSpec) -> None:
    kmock = import_tool("kmock", "kmock")
    cluster.fail(("post", kmock.resource(JOBS)), 403, 'jobs "sbx-q" is forbidden: exceeded '
                 "quota: sandboxes, requested: count/jobs.batch=1", times=1)
    with pytest.raises(BackendError) as info:
        backend.launch(make_spec("sbx-q"))
    assert info.value.transient is True and "ResourceQuota" in (info.value.hint or "")


class ScriptedApi:
    """A fake BatchV1Api/CoreV1Api: records every call and plays scripted outcomes."""

    def __init__(self, **outcomes: list[Any]) -> None:
        self.outcomes = outcomes
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((method, args, kwargs))
            script = self.outcomes.get(method) or []
            outcome = script.pop(0) if script else _default_answer(method)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

        return call


def _default_answer(method: str) -> Any:
    if method == "create_namespaced_job":
        return {"metadata": {"name": "sbx-1", "uid": "0b6d6a49-4b0a-4c3c-9d8e-2f1f3f6f0a11"}}
    if method.startswith("list_"):
        return {"metadata": {}, "items": []}
    if method == "read_namespaced_pod_log":
        return b""
    return {}


def _api_exception(status: int, message: str = "boom") -> Exception:
    from kubernetes.client.exceptions import ApiException

    error = ApiException(status=status, reason="Reason")
    error.body = json.dumps({"kind": "Status", "code": status, "message": message})
    return error


def _scripted(settings: Settings, sleeper: FakeSleeper, batch: ScriptedApi,
              core: ScriptedApi | None = None) -> KubernetesBackend:
    return KubernetesBackend(settings, batch_api=batch, core_api=core or ScriptedApi(),
                             sleeper=sleeper, jitter=lambda: 1.0, max_attempts=4,
                             backoff_base_s=0.5, backoff_max_s=1.5, informers=False)


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_transient_statuses_are_retried_with_capped_backoff(
    k8s_settings: Settings, sleeper: FakeSleeper, status: int
) -> None:
    import_tool("kubernetes", "kubernetes")
    batch = ScriptedApi(list_namespaced_job=[_api_exception(status)] * 10)
    with pytest.raises(BackendError) as info:
        _scripted(k8s_settings, sleeper, batch).observe()
    assert len(batch.calls) == 4
    assert sleeper.delays == [0.5, 1.0, 1.5]  # doubling, capped at backoff_max_s
    assert info.value.transient is True
    assert "after 4 attempts" in info.value.message


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 422])
def test_other_statuses_raise_at_once(k8s_settings: Settings, sleeper: FakeSleeper,
                                      status: int) -> None:
    import_tool("kubernetes", "kubernetes")
    batch = ScriptedApi(list_namespaced_job=[_api_exception(status)])
    with pytest.raises(KubernetesApiError) as info:
        _scripted(k8s_settings, sleeper, batch).observe()
    assert (len(batch.calls), sleeper.delays, info.value.status) == (1, [], status)
    assert info.value.transient is False


def test_connection_errors_are_retried(k8s_settings: Settings, sleeper: FakeSleeper) -> None:
    urllib3 = import_tool("urllib3", "urllib3")
    refused = urllib3.exceptions.MaxRetryError(None, "/apis", "connection refused")
    batch = ScriptedApi(list_namespaced_job=[refused, refused])
    assert _scripted(k8s_settings, sleeper, batch).observe() == []
    assert len(batch.calls) == 3 and len(sleeper.delays) == 2


def test_check_turns_a_403_into_unavailable_with_the_hint(k8s_settings: Settings,
                                                          sleeper: FakeSleeper) -> None:
    import_tool("kubernetes", "kubernetes")
    batch = ScriptedApi(list_namespaced_job=[_api_exception(403, "jobs.batch is forbidden")])
    with pytest.raises(UnavailableError) as info:
        _scripted(k8s_settings, sleeper, batch).check()
    assert "needs `list` on `jobs`" in (info.value.hint or "")


def test_every_request_has_a_timeout(k8s_settings: Settings, sleeper: FakeSleeper,
                                     make_spec: MakeSpec) -> None:
    import_tool("kubernetes", "kubernetes")
    pods = {"items": [{"metadata": {"name": "p", "labels": {}}}]}
    batch, core = ScriptedApi(), ScriptedApi(list_namespaced_pod=[pods, pods])
    backend = _scripted(k8s_settings, sleeper, batch, core)
    backend.launch(make_spec())
    backend.observe()
    backend.stop("sbx-1")
    backend.read_logs("sbx-1")
    calls = batch.calls + core.calls
    assert calls and all(kwargs.get("_request_timeout") for _, _, kwargs in calls)


# -- RBAC: every request the backend makes is granted by REQUIRED_RBAC ------------------


def _rbac_of(request: Any) -> tuple[str, str, str]:
    """(apiGroup, resource, verb) that a request needs, from its HTTP method and path."""
    resource = request.resource
    plural = resource.plural + (f"/{request.subresource}" if request.subresource else "")
    if request.method == "GET":
        verb = ("watch" if request.params.get("watch") == "true"
                else "get" if request.name else "list")
    else:
        verb = {"POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"}[
            request.method.value]
    return resource.group, plural, verb


def test_every_api_call_is_granted_by_required_rbac(backend: KubernetesBackend,
                                                    cluster: FakeCluster,
                                                    make_spec: MakeSpec) -> None:
    backend.check()
    backend.launch(make_spec("sbx-rbac"))
    backend.launch(make_spec("sbx-rbac"))  # conflict path: get (Job and Secret)
    backend.launch(make_spec("sbx-rbac", attempt=2))  # replace path: delete + create
    cluster.logs[cluster.start_pod("sbx-rbac")] = b"hi\n"
    backend.observe()
    backend.read_logs("sbx-rbac")
    backend.stop("sbx-rbac")
    backend.remove("sbx-rbac")
    used = {_rbac_of(r) for r in cluster.requests()}
    granted = {(group, resource, verb) for (group, resource), verbs in REQUIRED_RBAC.items()
               for verb in verbs}
    assert used <= granted, used - granted
    assert {("batch", "jobs", v) for v in ("create", "get", "list", "delete")} <= used
    assert {("", "pods", "list"), ("", "pods/log", "get")} <= used
    # the sandbox's Secret: created, read and replaced on the conflict path, deleted
    assert {("", "secrets", v) for v in ("create", "get", "delete")} <= used


# -- offline: render and construction touch no cluster ---------------------------------


def test_construction_and_render_need_no_cluster_nor_the_client() -> None:
    script = (
        "import sys\n"
        "from controller.backends.base import SandboxSpec\n"
        "from controller.backends.kubernetes.backend import KubernetesBackend\n"
        "from controller.settings import Settings\n"
        "from sandbox_image.contract import SandboxEnv\n"
        "env = SandboxEnv('sbx-1', 'run-1', 'board_meeting', 1, {}, 1, 'http://c', 't', 'u')\n"
        "b = KubernetesBackend(Settings(backend='kubernetes'))\n"
        "job = b.render(SandboxSpec(env=env, image='i', command=(), timeout_s=5))\n"
        "assert job['metadata']['name'] == 'sbx-1'\n"
        "assert 'kubernetes' not in sys.modules, 'kubernetes was imported'\n"
    )
    env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": "/nonexistent", "HOME": "/nonexistent"}
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_missing_credentials_are_unavailable_not_a_crash(
    k8s_settings: Settings, monkeypatch: pytest.MonkeyPatch, make_spec: MakeSpec
) -> None:
    import_tool("kubernetes", "kubernetes")
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    backend = KubernetesBackend(k8s_settings)
    with pytest.raises(UnavailableError) as info:
        backend.check()
    assert "KUBECONFIG" in (info.value.hint or "")
    with pytest.raises(UnavailableError):
        backend.launch(make_spec())
