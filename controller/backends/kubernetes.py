"""The `kubernetes` backend: one batch/v1 Job per sandbox, found again by label.

The official client is imported only in this module, and only when a method first
needs the cluster: constructing the backend and `render` work offline (`--dry-run`).
Status comes from Job conditions and the Pod's container states, logs from pods/log.
API calls retry only what is known to be transient (429, 5xx, connection errors)
with capped exponential backoff and jitter; anything else raises BackendError at
once, chained, with a hint (a 403 names the RBAC verb and resource to grant).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from controller.backends.base import Backend, Notify, Observed, SandboxSpec
from controller.backends.kubernetes_informer import WATCH_TIMEOUT_S, Gone, Informer
from controller.backends.kubernetes_job import (
    CONTAINER_NAME,
    attempt_key,
    build_job,
    object_name,
    observe_job,
    pod_order,
)
from controller.errors import BackendError, NotFoundError, UnavailableError
from controller.retry import backoff_s
from sandbox_image.contract import (
    LABEL_ATTEMPT,
    LABEL_CONTROLLER,
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_SANDBOX_ID,
)

if TYPE_CHECKING:
    from controller.settings import Settings

log = logging.getLogger(__name__)

# The rights the controller's identity needs, as RBAC data: (apiGroup, resource) -> verbs.
# The chart's Role (charts/simple/templates/controller/role.yaml) grants exactly this
# (tests/k8s/test_chart.py), and every call the backend makes is covered by it
# (tests/k8s/test_kubernetes_backend.py). The backend itself calls create/get/list/delete
# on jobs, list on pods and get on pods/log; get and watch on pods and watch on jobs let
# tools that follow sandboxes (kubectl get -w, logs -f) run under the same identity.
REQUIRED_RBAC: dict[tuple[str, str], frozenset[str]] = {
    ("batch", "jobs"): frozenset({"create", "get", "list", "watch", "delete"}),
    ("", "pods"): frozenset({"get", "list", "watch"}),
    ("", "pods/log"): frozenset({"get"}),
}

MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}"


class KubernetesApiError(BackendError):
    """A Kubernetes API call failed with an HTTP status (0 when none came back)."""

    def __init__(
        self, message: str, *, status: int, hint: str | None = None, transient: bool = False
    ) -> None:
        super().__init__(message, hint=hint, transient=transient)
        self.status = status


class KubernetesBackend(Backend):
    """Sandboxes as Jobs in one namespace; the API objects, clock and sleeper are injectable."""

    name = "kubernetes"
    supports_adoption = True
    supports_oom_detection = True

    def __init__(
        self,
        settings: Settings,
        notify: Notify | None = None,
        *,
        batch_api: Any = None,
        core_api: Any = None,
        clock: Callable[[], float] = time.time,
        sleeper: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
        max_attempts: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        request_timeout_s: float = 15.0,
        unschedulable_grace_s: float = 300.0,
        informers: bool = True,
    ) -> None:
        super().__init__(notify)
        self.controller_id = settings.controller_id
        # Only this controller's objects: two controllers in one namespace stay apart.
        self.selector = f"{MANAGED_SELECTOR},{LABEL_CONTROLLER}={self.controller_id}"
        self._use_informers = informers
        self._informers: tuple[Informer, Informer] | None = None
        self.namespace = settings.kubernetes_namespace
        self.service_account = settings.kubernetes_sandbox_service_account
        self.job_ttl_s = settings.kubernetes_job_ttl_s
        self._batch = batch_api
        self._core = core_api
        self._api_client: Any = None  # only when this backend built the API objects
        self._init_lock = threading.Lock()
        self._clock = clock
        self._sleep = sleeper
        self._jitter = jitter
        self._max_attempts = max(1, max_attempts)
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._request_timeout_s = request_timeout_s
        self._unschedulable_grace_s = unschedulable_grace_s

    # -- Backend interface ------------------------------------------------------------

    def render(self, spec: SandboxSpec) -> dict[str, Any]:
        """The Job `launch` would create. Pure: no cluster access."""
        return build_job(spec, self.namespace, self.service_account, self.job_ttl_s)

    def launch(self, spec: SandboxSpec) -> None:
        """Create the Job. The same attempt's Job is adopted, an earlier attempt's replaced."""
        body = self.render(spec)
        batch, _ = self._apis()
        try:
            self._call("create", "jobs", batch.create_namespaced_job, self.namespace, body)
        except KubernetesApiError as e:
            if e.status != 409:
                raise
            if self._holds_attempt(spec):
                # A create that reached the API before a restart or a lost answer.
                log.info(
                    "Job %s/%s (attempt %d) already exists; adopting it",
                    self.namespace,
                    spec.sandbox_id,
                    spec.env.attempt,
                )
                return
            self._replace_earlier_attempt(batch, spec, body)
        log.info(
            "launched Job %s/%s (run %s, attempt %d)",
            self.namespace,
            spec.sandbox_id,
            spec.env.run_id,
            spec.env.attempt,
        )

    def observe(self) -> list[Observed]:
        """Every Job of this controller in the namespace, matched to its Pods by label: from the
        informers' cache (no API call), or listed when informers are off."""
        cache = self._cache()
        if cache is not None:
            jobs, pods = cache[0].items(), cache[1].items()
        else:
            batch, core = self._apis()
            jobs = self._list("jobs", batch.list_namespaced_job, self.selector)
            pods = self._list("pods", core.list_namespaced_pod, self.selector)
        pods_by_attempt: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for pod in pods:
            pods_by_attempt.setdefault(attempt_key(pod), []).append(pod)
        now = self._clock()
        observed = []
        for job in jobs:
            seen = observe_job(
                job, pods_by_attempt.get(attempt_key(job), []), now, self._unschedulable_grace_s
            )
            if seen is None:
                log.warning("ignoring Job %s: it lacks SIMPLE's labels", object_name(job))
            else:
                observed.append(seen)
        return observed

    def stop(self, sandbox_id: str) -> None:
        """Delete the Job and, in the background, its Pods. A missing Job is no error."""
        if self._delete_job(sandbox_id):
            log.info("stopped Job %s/%s", self.namespace, sandbox_id)

    def remove(self, sandbox_id: str) -> None:
        """Delete the Job and its Pods (after the controller archived the logs)."""
        if self._delete_job(sandbox_id):
            log.info("removed Job %s/%s", self.namespace, sandbox_id)

    def read_logs(self, sandbox_id: str) -> bytes:
        """The newest Pod's output so far; empty while its container is still starting."""
        _, core = self._apis()
        cache = self._cache()
        if cache is not None:
            pods = cache[1].find(lambda p: attempt_key(p)[0] == sandbox_id)
        else:
            selector = f"{self.selector},{LABEL_SANDBOX_ID}={sandbox_id}"
            pods = self._list("pods", core.list_namespaced_pod, selector)
        if not pods:
            raise NotFoundError(
                f"sandbox {sandbox_id} has no pod in namespace {self.namespace!r}",
                hint="its Job was removed or has not started a pod yet",
            )
        pod_name = object_name(max(pods, key=pod_order))
        try:
            response = self._call(
                "get",
                "pods/log",
                core.read_namespaced_pod_log,
                pod_name,
                self.namespace,
                container=CONTAINER_NAME,
            )
        except KubernetesApiError as e:
            if e.status == 404:
                raise NotFoundError(
                    f"pod {pod_name} of sandbox {sandbox_id} is gone",
                    hint="its logs are only in the controller's archive",
                ) from e
            if e.status == 400:  # "container ... is waiting to start": no output yet
                return b""
            raise
        return _body_bytes(response)

    def check(self) -> None:
        """Raise UnavailableError when the API cannot be reached or refuses to list Jobs."""
        if self._informers is not None:  # watching: answering readiness probes costs no call
            return
        try:
            batch, _ = self._apis()
            self._call(
                "list",
                "jobs",
                batch.list_namespaced_job,
                self.namespace,
                label_selector=MANAGED_SELECTOR,
                limit=1,
            )
        except BackendError as e:
            raise UnavailableError(
                f"the kubernetes backend cannot be used: {e.message}", hint=e.hint
            ) from e

    def close(self) -> None:
        for informer in self._informers or ():
            informer.close()
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None

    # -- helpers ----------------------------------------------------------------------

    def _holds_attempt(self, spec: SandboxSpec) -> bool:
        """Whether the Job named like the sandbox is this very attempt's."""
        batch, _ = self._apis()
        try:
            existing = _json(
                self._call(
                    "get", "jobs", batch.read_namespaced_job, spec.sandbox_id, self.namespace
                )
            )
        except KubernetesApiError as e:
            if e.status == 404:  # deleted in between
                return False
            raise
        labels = (existing.get("metadata") or {}).get("labels") or {}
        return labels.get(LABEL_ATTEMPT) == str(spec.env.attempt)

    def _replace_earlier_attempt(self, batch: Any, spec: SandboxSpec, body: dict[str, Any]) -> None:
        """An earlier attempt's leftover holds the name: delete it and create once more."""
        log.info(
            "replacing a leftover Job %s/%s with attempt %d",
            self.namespace,
            spec.sandbox_id,
            spec.env.attempt,
        )
        self._delete_job(spec.sandbox_id)
        try:
            self._call("create", "jobs", batch.create_namespaced_job, self.namespace, body)
        except KubernetesApiError as e:
            if e.status != 409:
                raise
            raise KubernetesApiError(
                f"cannot launch attempt {spec.env.attempt} of sandbox {spec.sandbox_id}: "
                "the Job of an earlier attempt is still being deleted",
                status=409,
                transient=True,
                hint="it goes away within seconds; the controller retries the launch",
            ) from e

    def _delete_job(self, sandbox_id: str) -> bool:
        batch, _ = self._apis()
        try:
            self._call(
                "delete",
                "jobs",
                batch.delete_namespaced_job,
                sandbox_id,
                self.namespace,
                propagation_policy="Background",
            )
        except KubernetesApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    def _list(
        self, resource: str, method: Callable[..., Any], selector: str
    ) -> list[Mapping[str, Any]]:
        return self._list_versioned(resource, method, selector)[0]

    def _list_versioned(
        self, resource: str, method: Callable[..., Any], selector: str
    ) -> tuple[list[Mapping[str, Any]], str | None]:
        """Every object the selector matches (paged) and the list's resourceVersion."""
        items: list[Mapping[str, Any]] = []
        token: str | None = None
        version: str | None = None
        while True:
            page_args: dict[str, Any] = {"label_selector": selector, "limit": 500}
            if token:
                page_args["_continue"] = token
            page = _json(self._call("list", resource, method, self.namespace, **page_args))
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            version = version or meta.get("resourceVersion")
            token = meta.get("continue")
            if not token:
                return items, version

    # -- informers: the cache observe and read_logs read instead of listing -----------

    def _cache(self) -> tuple[Informer, Informer] | None:
        """The Job and Pod informers, started (one LIST each) on first use; None when off."""
        if not self._use_informers:
            return None
        with self._init_lock:
            if self._informers is None:
                batch, core = self._apis_unlocked()
                labels = dict(part.split("=", 1) for part in self.selector.split(","))
                jobs = self._informer("jobs", batch.list_namespaced_job, labels)
                pods = self._informer("pods", core.list_namespaced_pod, labels)
                self._informers = (jobs, pods)
            return self._informers

    def _informer(
        self, kind: str, lister: Callable[..., Any], labels: dict[str, str]
    ) -> Informer:
        def list_all() -> tuple[list[Mapping[str, Any]], str | None]:
            return self._list_versioned(kind, lister, self.selector)

        def watch(version: str | None) -> Any:
            return self._watch(lister, version)

        informer = Informer(kind, list_all, watch, labels, self._notify)
        informer.start()
        return informer

    def _watch(self, lister: Callable[..., Any], version: str | None) -> Any:
        """Open one watch (a streaming answer) from `version`, with bookmarks."""
        kwargs: dict[str, Any] = {
            "label_selector": self.selector,
            "watch": True,
            "allow_watch_bookmarks": True,
            "timeout_seconds": WATCH_TIMEOUT_S,
            "_preload_content": False,
            "_request_timeout": (self._request_timeout_s, WATCH_TIMEOUT_S + 30),
        }
        if version:
            kwargs["resource_version"] = version
        from kubernetes.client.exceptions import ApiException

        try:
            return lister(self.namespace, **kwargs)
        except ApiException as e:
            if int(e.status or 0) == 410:
                raise Gone() from e
            raise

    def _apis(self) -> tuple[Any, Any]:
        """The BatchV1Api and CoreV1Api, built on first use from in-cluster config or kubeconfig."""
        with self._init_lock:
            return self._apis_unlocked()

    def _apis_unlocked(self) -> tuple[Any, Any]:
        if self._batch is None or self._core is None:
            from kubernetes import client

            self._api_client = _load_api_client()
            self._batch = self._batch or client.BatchV1Api(self._api_client)
            self._core = self._core or client.CoreV1Api(self._api_client)
        return self._batch, self._core

    def _call(
        self, verb: str, resource: str, method: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """One API call, its raw answer; 429, 5xx and connection errors are retried, the rest
        raise at once. `verb` and `resource` name the RBAC right the call needs, for hints."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        kwargs.setdefault("_request_timeout", self._request_timeout_s)
        # Raw answers: no model round trip that a newer server's objects could fail, and a
        # log that happens to be JSON stays bytes.
        kwargs.setdefault("_preload_content", False)
        for attempt in range(1, self._max_attempts + 1):
            last = attempt == self._max_attempts
            try:
                return method(*args, **kwargs)
            except ApiException as e:
                status = int(e.status or 0)
                if not _is_transient(status) or last:
                    raise _api_error(e, verb, resource, self.namespace, attempt) from e
                delay = self._backoff(attempt, _retry_after(e))
                log.warning(
                    "%s %s: %s %s; retry %d/%d in %.1fs",
                    verb,
                    resource,
                    status,
                    e.reason,
                    attempt,
                    self._max_attempts - 1,
                    delay,
                )
            except (urllib3.exceptions.HTTPError, OSError) as e:
                if last:
                    raise KubernetesApiError(
                        f"cannot reach the Kubernetes API to {verb} {resource} "
                        f"after {attempt} attempts: {e}",
                        status=0,
                        transient=True,
                        hint="check the API server address (kubeconfig or in-cluster env) "
                        "and the network between the controller and the cluster",
                    ) from e
                delay = self._backoff(attempt, None)
                log.warning(
                    "%s %s: %s; retry %d/%d in %.1fs",
                    verb,
                    resource,
                    e,
                    attempt,
                    self._max_attempts - 1,
                    delay,
                )
            self._sleep(delay)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _backoff(self, attempt: int, retry_after_s: float | None) -> float:
        """Capped exponential backoff with equal jitter; a server's Retry-After is a floor."""
        delay = backoff_s(
            attempt, self._backoff_base_s, self._backoff_max_s, self._jitter, equal_jitter=True
        )
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, self._backoff_max_s))
        return delay


def _json(answer: Any) -> dict[str, Any]:
    """An API answer as the JSON dict the server sent (camelCase keys)."""
    if isinstance(answer, Mapping):
        return dict(answer)
    data = _body_bytes(answer)
    return dict(json.loads(data)) if data else {}


def _body_bytes(response: Any) -> bytes:
    if isinstance(response, bytes):
        return response
    if isinstance(response, str):
        return response.encode()
    return bytes(response.data)


# -- API errors -------------------------------------------------------------------------


def _is_transient(status: int) -> bool:
    return status == 429 or 500 <= status <= 599


def _retry_after(e: Any) -> float | None:
    headers = getattr(e, "headers", None) or {}
    try:
        return float(str(headers.get("Retry-After")))
    except (TypeError, ValueError):
        return None


def _api_error(
    e: Any, verb: str, resource: str, namespace: str, attempts: int
) -> KubernetesApiError:
    """A BackendError that names the call, the API's reason, and what to do."""
    status = int(e.status or 0)
    message = _status_message(e)
    what = f"cannot {verb} {resource} in namespace {namespace!r}: {e.reason} ({status})"
    if message:
        what += f": {message}"
    hint: str | None = None
    transient = False
    if _is_transient(status):
        what += f" after {attempts} attempts"
        hint, transient = "the API server is overloaded or restarting; try again later", True
    elif status == 403 and "exceeded quota" in message:
        hint, transient = (
            ("the namespace's ResourceQuota is used up; lower max_parallel or raise the quota"),
            True,
        )
    elif status == 403:
        hint = (
            f"the controller's ServiceAccount needs `{verb}` on `{resource}` in namespace "
            f"{namespace!r} (the chart's Role grants it; see docs/kubernetes.md)"
        )
    elif status == 401:
        hint = "the API server refused the controller's credentials: check its token or kubeconfig"
    elif status == 404:
        hint = f"check that namespace {namespace!r} exists (SIMPLE_KUBERNETES_NAMESPACE)"
    elif status in (400, 422):
        hint = (
            "the API server refused the manifest; see it with "
            "`simplectl run --backend kubernetes --dry-run -o yaml`"
        )
    elif status == 0:
        hint = "no HTTP answer: check the API server address and its TLS certificate"
    return KubernetesApiError(what, status=status, hint=hint, transient=transient)


def _status_message(e: Any) -> str:
    """The `message` of the Status object the API server answers errors with."""
    body = getattr(e, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not body:
        return ""
    try:
        decoded = json.loads(body)
    except ValueError:
        return str(body)[:300]
    return str(decoded.get("message", "")) if isinstance(decoded, dict) else ""


def _load_api_client() -> Any:
    """An ApiClient from in-cluster config, else kubeconfig; reads files, contacts nothing."""
    try:
        from kubernetes import client, config
    except ImportError as e:
        raise UnavailableError(
            "the kubernetes backend needs the `kubernetes` package",
            hint="pip install 'simple-orchestrator[kubernetes]'",
        ) from e
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        try:
            config.load_kube_config(client_configuration=configuration)
        except (config.ConfigException, OSError) as e:
            raise UnavailableError(
                f"no Kubernetes credentials: not in a cluster and no usable kubeconfig ({e})",
                hint="run the controller in-cluster with its ServiceAccount, or set KUBECONFIG",
            ) from e
    configuration.retries = 0  # retries are this module's policy, not urllib3's
    return client.ApiClient(configuration)
