"""Fixtures for the Kubernetes tests: no cluster, ever.

`cluster` is a kmock KubernetesEmulator (a fake API server on loopback) served from
a background thread, so the real, synchronous `kubernetes` client talks HTTP to it.
The tests play the cluster's part: they start Pods for Jobs and patch in Job and Pod
statuses. Tools (helm, kubernetes-validate, kmock) come from
scripts/install-k8s-tools.sh; a missing one is a skip here and a failure in CI.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from controller.backends.base import Resources, SandboxSpec
from controller.settings import Settings
from sandbox_image.contract import SandboxEnv

REPO_ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "sandboxes"
SANDBOX_SERVICE_ACCOUNT = "simple-sandbox"
JOB_TTL_S = 600

MakeSpec = Callable[..., SandboxSpec]


def require_tool(name: str, reason: str) -> None:
    """A missing test tool: a failure in CI (CI=true), a skip elsewhere."""
    message = f"{name} is not available: {reason}; run scripts/install-k8s-tools.sh"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def import_tool(module: str, package: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        require_tool(package, f"`import {module}` failed")


@pytest.fixture(scope="session")
def helm() -> str:
    """The helm binary: .cache/bin/helm (scripts/install-k8s-tools.sh) or helm on PATH."""
    cached = REPO_ROOT / ".cache" / "bin" / "helm"
    if cached.is_file() and os.access(cached, os.X_OK):
        return str(cached)
    found = shutil.which("helm")
    if found:
        return found
    require_tool("helm", "neither .cache/bin/helm nor helm on PATH")
    raise AssertionError("unreachable")


@pytest.fixture
def k8s_settings() -> Settings:
    return Settings.model_validate({
        "backend": "kubernetes",
        "kubernetes_namespace": NAMESPACE,
        "kubernetes_sandbox_service_account": SANDBOX_SERVICE_ACCOUNT,
        "kubernetes_job_ttl_s": JOB_TTL_S,
    })


@pytest.fixture
def make_spec(k8s_settings: Settings) -> MakeSpec:
    """Build a SandboxSpec; keyword arguments override the defaults."""

    def build(sandbox_id: str = "sbx-1", *, run_id: str = "run-1", attempt: int = 1,
              template_id: str = "board_meeting", cpu: str | None = "500m",
              memory: str | None = "256Mi", timeout_s: int = 1800,
              image: str = "simple-sandbox:latest",
              command: tuple[str, ...] = ("python", "-m", "sandbox_image")) -> SandboxSpec:
        env = SandboxEnv(
            sandbox_id=sandbox_id, run_id=run_id, template_id=template_id, attempt=attempt,
            template_config={"agents": 6, "steps": 7}, seed=42,
            controller_url="http://simple.simple.svc.cluster.local:8080",
            sandbox_token=f"token-{sandbox_id}-{attempt}",
            snapshot_url=f"http://minio:9000/simple/{run_id}/{sandbox_id}.sqlite?sig=x",
        )
        return SandboxSpec(env=env, image=image, command=command, timeout_s=timeout_s,
                           resources=Resources(cpu=cpu, memory=memory),
                           controller_id=k8s_settings.controller_id)

    return build


class FakeCluster:
    """A kmock KubernetesEmulator on a loopback port, run by an event loop in a thread."""

    def __init__(self, window: int | None = None) -> None:
        """`window`: keep only the last this many requests in kmock's log (it matches each
        new request against the whole log, so a long one makes it quadratic) and hand the
        rest over through `take_requests`; None (tests) keeps every request in the log."""
        self.kmock: Any = import_tool("kmock", "kmock")
        self.window = window
        self.url = ""
        self.logs: dict[str, bytes] = {}  # pod name -> its log; absent: still starting
        self._loop = asyncio.new_event_loop()
        self._started: Future[None] = Future()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._serve, name="kmock", daemon=True)
        self._thread.start()
        self._started.result(timeout=10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        kmock = self.kmock
        try:
            async with _emulator_class(kmock, self.window)() as emulator, kmock.Server(
                    emulator) as server:
                self.emulator = emulator
                self.url = str(server.url).rstrip("/")
                self._stop = asyncio.Event()
                # Like the real API server: lists honour labelSelector; pods/log serves text.
                emulator[kmock.action.LIST] << self._serve_list
                emulator["get", kmock.resource("v1/pods"), kmock.subresource("log")] << (
                    self._serve_log)
                self._started.set_result(None)
                await self._stop.wait()
        except BaseException as e:  # pragma: no cover - surfaces a broken start in the test
            if not self._started.done():
                self._started.set_exception(e)
            raise

    def _serve_list(self, request: Any) -> Any:
        selector = dict(part.split("=", 1) for part in
                        filter(None, request.params.get("labelSelector", "").split(",")))
        items = []
        for (resource, namespace, _), obj in self.emulator.objects.items():
            if obj.deleted or resource != request.resource:
                continue
            if request.namespace is not None and namespace != request.namespace:
                continue
            labels = (obj.raw.get("metadata") or {}).get("labels") or {}
            if all(labels.get(k) == v for k, v in selector.items()):
                items.append(obj.raw)
        return {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                "items": items}

    def _serve_log(self, request: Any) -> Any:
        if request.name in self.logs:
            return self.kmock.Response(status=200, payload=self.logs[request.name])
        return self.kmock.Response(status=400, payload=_status(
            400, "BadRequest", f'container "sandbox" in pod "{request.name}" is waiting to '
            "start: ContainerCreating"))

    # -- playing the cluster's part ----------------------------------------------------

    def on_loop(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` in the server's thread (kmock is not thread-safe) and return its result."""

        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=10)

    def apis(self) -> tuple[Any, Any]:
        """Real BatchV1Api and CoreV1Api of the `kubernetes` client, pointed at this server."""
        from kubernetes import client

        configuration = client.Configuration(host=self.url)
        configuration.retries = 0
        api_client = client.ApiClient(configuration)
        return client.BatchV1Api(api_client), client.CoreV1Api(api_client)

    def job(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        return dict(self.on_loop(lambda: self.emulator.objects[
            "batch/v1/jobs", namespace, name].raw))

    def has_job(self, name: str, namespace: str = NAMESPACE) -> bool:
        return self.has("batch/v1/jobs", name, namespace)

    def has(self, resource: str, name: str, namespace: str = NAMESPACE) -> bool:
        key = (self.kmock.resource(resource), namespace, name)
        return bool(self.on_loop(lambda: key in self.emulator.objects
                                 and not self.emulator.objects[key].deleted))

    def secret(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        return dict(self.on_loop(lambda: self.emulator.objects["v1/secrets", namespace,
                                                                name].raw))

    def put(self, resource: str, obj: dict[str, Any]) -> None:
        """Store an object as if someone else had created it (watchers see it ADDED)."""
        meta = obj["metadata"]
        key = (resource, meta.get("namespace", NAMESPACE), meta["name"])
        self.on_loop(lambda: self.emulator.objects.__setitem__(key, obj))
        self._publish(resource, "ADDED", key)

    def patch(self, resource: str, name: str, changes: dict[str, Any],
              namespace: str = NAMESPACE) -> None:
        """Merge `changes` into an object, as the Job controller or kubelet would (watchers
        see it MODIFIED)."""
        self.on_loop(lambda: self.emulator.objects[resource, namespace, name].patch(changes))
        self._publish(resource, "MODIFIED", (resource, namespace, name))

    def _publish(self, resource: str, kind: str, key: tuple[str, str, str]) -> None:
        """Tell open watches, as the API server does (kmock does it only for API writes)."""

        async def put() -> None:
            raw = self.emulator.objects[key].raw
            await self.emulator._buses[self.kmock.resource(resource)].put(
                {"type": kind, "object": raw})

        asyncio.run_coroutine_threadsafe(put(), self._loop).result(timeout=10)

    def start_pod(self, job_name: str, pod_name: str | None = None,
                  created: str = "2026-11-21T12:00:00Z", **status: Any) -> str:
        """Create the Job's Pod from its template (the Job controller's part)."""
        job = self.job(job_name)
        template = job["spec"]["template"]
        pod_name = pod_name or f"{job_name}-abcde"
        labels = dict(template["metadata"]["labels"], **{"batch.kubernetes.io/job-name": job_name})
        self.put("v1/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": NAMESPACE, "labels": labels,
                         "creationTimestamp": created},
            "spec": template["spec"],
            "status": {"phase": "Pending", **status},
        })
        return pod_name

    def requests(self) -> list[Any]:
        return list(self.on_loop(lambda: list(self.emulator)))

    def take_requests(self) -> list[Any]:
        """The requests so far, and forget them: kmock matches every new request against
        its whole log, so a long bench hands them over in slices (its `_requests` list is
        the log its views read)."""
        def take() -> list[Any]:
            if self.window is not None:
                taken, self.emulator.seen = self.emulator.seen, []
                return taken
            taken = list(self.emulator)
            self.emulator._requests.clear()
            return taken
        return list(self.on_loop(take))

    def fail(self, criteria: tuple[Any, ...], status: int, message: str, times: int,
             headers: dict[str, str] | None = None) -> None:
        """Answer the next `times` requests matching `criteria` with an API error."""
        reason = {403: "Forbidden", 409: "AlreadyExists", 422: "Invalid",
                  429: "TooManyRequests"}.get(status, "InternalError")
        response = self.kmock.Response(status=status, payload=_status(status, reason, message),
                                       headers=headers)

        def install() -> None:
            (self.emulator[criteria][:times] ** 10) << response

        self.on_loop(install)

    def close(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=3)
        if not self._thread.is_alive():  # a watch left open keeps it serving: let it be
            self._loop.close()


def _emulator_class(kmock: Any, window: int | None = None) -> Any:
    """kmock's emulator, which also gives every created object a uid, as the API server does
    (ownerReferences name their owner by it), also when a scripted failure answers; with a
    `window`, its log keeps only the latest requests and `seen` every one."""

    class Emulator(kmock.KubernetesEmulator):  # type: ignore[misc]
        seen: list[Any]

        async def _handle(self, request: Any) -> Any:
            if request.action == kmock.action.CREATE and isinstance(request.data, dict):
                request.data.setdefault("metadata", {}).setdefault("uid", str(uuid.uuid4()))
            if window is not None:
                if not hasattr(self, "seen"):
                    self.seen = []
                self.seen.append(request)
                del self._requests[:-window]  # this request stays: reactions match it by identity
            return await super()._handle(request)

    return Emulator


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "code": code, "reason": reason, "message": message}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    try:
        yield fake
    finally:
        fake.close()


def request_kinds(requests: list[Any], counts: dict[str, int] | None = None
                  ) -> dict[str, int]:
    """`counts` (or zeros) plus kmock's `requests` by kind: list, watch, create, delete,
    log, other."""
    counts = dict(counts or dict.fromkeys(("list", "watch", "create", "log", "delete", "other"), 0))
    for r in requests:
        if r.method == "GET" and r.name is None:
            counts["watch" if r.params.get("watch") in ("true", "True", "1") else "list"] += 1
        elif r.method == "POST":
            counts["create"] += 1
        elif r.method == "DELETE":
            counts["delete"] += 1
        elif r.method == "GET" and r.subresource == "log":
            counts["log"] += 1
        else:
            counts["other"] += 1
    return counts
