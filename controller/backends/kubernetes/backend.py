"""The `kubernetes` backend: one batch/v1 Job per sandbox, found again by label.

The official client is imported only in this module, and only when a method first
needs the cluster: constructing the backend and `render` work offline (`--dry-run`).
Status comes from Job conditions and the Pod's container states (kept by informers,
`informer.py`, read by `job_status.py`), logs from pods/log. Jobs and their Secrets are
created and deleted by `SandboxObjects` (`objects.py`). API calls go through `KubeCalls`
(`calls.py`): only what is known to be transient is retried; anything else raises
BackendError at once, chained, with a hint (a 403 names the RBAC verb and resource to
grant).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from controller.backends import logbudget
from controller.backends.base import Backend, LogView, Notify, Observed, SandboxSpec
from controller.backends.kubernetes.api import (
    KubernetesApiError,
    body_chunks,
)
from controller.backends.kubernetes.calls import KubeCalls
from controller.backends.kubernetes.informer import Informer
from controller.backends.kubernetes.job import (
    CONTAINER_NAME,
    build_job,
)
from controller.backends.kubernetes.job_status import (
    CONFIG_ERROR_GRACE_S,
    attempt_key,
    object_name,
    observe_job,
    pod_order,
)
from controller.backends.kubernetes.objects import SandboxObjects
from controller.errors import BackendError, NotFoundError, UnavailableError
from sandbox_image.contract import (
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
# on jobs, create/get/delete on secrets (each sandbox's own), list on pods and get on
# pods/log; get and watch on pods and watch on jobs let tools that follow sandboxes
# (kubectl get -w, logs -f) run under the same identity.
REQUIRED_RBAC: dict[tuple[str, str], frozenset[str]] = {
    ("batch", "jobs"): frozenset({"create", "get", "list", "watch", "delete"}),
    ("", "pods"): frozenset({"get", "list", "watch"}),
    ("", "pods/log"): frozenset({"get"}),
    ("", "secrets"): frozenset({"create", "get", "delete"}),
}

MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}"
LOG_READ_BUDGETS = 4  # a log read asks the API for at most this many log budgets (limitBytes)


class KubernetesBackend(Backend):
    """Sandboxes as Jobs in one namespace; the clock and the API calls (`KubeCalls`: API
    objects, sleeper, jitter) are injectable."""

    name = "kubernetes"
    supports_adoption = True
    supports_oom_detection = True
    stop_removes_output = True  # stopping deletes the Job, its Pods and their logs

    def __init__(
        self,
        settings: Settings,
        notify: Notify | None = None,
        *,
        clock: Callable[[], float] = time.time,
        unschedulable_grace_s: float = 300.0,
        config_error_grace_s: float = CONFIG_ERROR_GRACE_S,
        informers: bool = True,
        **api: Any,
    ) -> None:
        """`api`: KubeCalls' options (the API objects, sleeper, jitter, retries, timeout),
        its defaults where not given."""
        super().__init__(notify)
        self.controller_id = settings.controller_id
        # Only this controller's objects: two controllers in one namespace stay apart.
        self.selector = f"{MANAGED_SELECTOR},{LABEL_CONTROLLER}={self.controller_id}"
        self._use_informers = informers
        self._informers: tuple[Informer, Informer] | None = None
        self.namespace = settings.kubernetes_namespace
        self.service_account = settings.kubernetes_sandbox_service_account
        self.job_ttl_s = settings.kubernetes_job_ttl_s
        self.log_budget = settings.log_budget
        self.api = KubeCalls(self.namespace, self.selector, **api)
        self.objects = SandboxObjects(self.api, self.namespace)
        self._clock = clock
        self._unschedulable_grace_s = unschedulable_grace_s
        self._config_error_grace_s = config_error_grace_s

    # -- Backend interface ------------------------------------------------------------

    def render(self, spec: SandboxSpec) -> dict[str, Any]:
        """The Job `launch` would create. Pure: no cluster access."""
        return build_job(spec, self.namespace, self.service_account, self.job_ttl_s)

    def launch(self, spec: SandboxSpec) -> None:
        """Create the Job, then its Secret. The same attempt's Job is adopted, an earlier
        attempt's replaced. A Secret that cannot be created takes its Job with it."""
        body = self.render(spec)
        job = self.objects.create_job(spec, body)
        self.objects.create_secret(spec, job)
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
            batch, core = self.api.apis()
            jobs = self.api.list_objects("jobs", batch.list_namespaced_job, self.selector)
            pods = self.api.list_objects("pods", core.list_namespaced_pod, self.selector)
        pods_by_attempt: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for pod in pods:
            pods_by_attempt.setdefault(attempt_key(pod), []).append(pod)
        now = self._clock()
        observed = []
        for job in jobs:
            seen = observe_job(
                job,
                pods_by_attempt.get(attempt_key(job), []),
                now,
                self._unschedulable_grace_s,
                self._config_error_grace_s,
            )
            if seen is None:
                log.warning("ignoring Job %s: it lacks SIMPLE's labels", object_name(job))
            else:
                observed.append(seen)
        return observed

    def stop(self, sandbox_id: str) -> None:
        """Delete the Job and, in the background, its Pods. A missing Job is no error."""
        if self.objects.delete_job(sandbox_id):
            log.info("stopped Job %s/%s", self.namespace, sandbox_id)

    def remove(self, sandbox_id: str) -> None:
        """Delete the Job and its Pods (after the controller archived the logs)."""
        if self.objects.delete_job(sandbox_id):
            log.info("removed Job %s/%s", self.namespace, sandbox_id)

    def read_logs(self, sandbox_id: str) -> bytes:
        """The newest Pod's output so far, as kept under the log budget; empty while its
        container is still starting."""
        return b"".join(self.open_logs(sandbox_id).chunks)

    def open_logs(self, sandbox_id: str) -> LogView:
        """The newest Pod's output streamed from the API (at most LOG_READ_BUDGETS times the
        budget: the kubelet's own rotation bounds what it keeps) through the log budget
        into a temporary directory, a chunk at a time."""
        _, core = self.api.apis()
        cache = self._cache()
        if cache is not None:
            pods = cache[1].find(lambda p: attempt_key(p)[0] == sandbox_id)
        else:
            selector = f"{self.selector},{LABEL_SANDBOX_ID}={sandbox_id}"
            pods = self.api.list_objects("pods", core.list_namespaced_pod, selector)
        if not pods:
            raise NotFoundError(
                f"sandbox {sandbox_id} has no pod in namespace {self.namespace!r}",
                hint="its Job was removed or has not started a pod yet",
            )
        pod_name = object_name(max(pods, key=pod_order))
        try:
            response = self.api.call(
                "get",
                "pods/log",
                core.read_namespaced_pod_log,
                pod_name,
                self.namespace,
                container=CONTAINER_NAME,
                limit_bytes=self.log_budget * LOG_READ_BUDGETS,
            )
        except KubernetesApiError as e:
            if e.status == 404:
                raise NotFoundError(
                    f"pod {pod_name} of sandbox {sandbox_id} is gone",
                    hint="its logs are only in the controller's archive",
                ) from e
            if e.status == 400:  # "container ... is waiting to start": no output yet
                return LogView(iter(()))
            raise
        kept, dropped = logbudget.spool(body_chunks(response), self.log_budget)
        return LogView(kept, dropped)

    def check(self) -> None:
        """Raise UnavailableError when the API cannot be reached or refuses to list Jobs."""
        if self._informers is not None:  # watching: answering readiness probes costs no call
            return
        try:
            batch, _ = self.api.apis()
            self.api.call(
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
        self.api.close()

    # -- informers: the cache observe and read_logs read instead of listing -----------

    def _cache(self) -> tuple[Informer, Informer] | None:
        """The Job and Pod informers, started (one LIST each) on first use; None when off."""
        if not self._use_informers:
            return None
        with self.api.lock:
            if self._informers is None:
                batch, core = self.api.apis_unlocked()
                labels = dict(part.split("=", 1) for part in self.selector.split(","))
                jobs = self._informer("jobs", batch.list_namespaced_job, labels)
                pods = self._informer("pods", core.list_namespaced_pod, labels)
                self._informers = (jobs, pods)
            return self._informers

    def _informer(self, kind: str, lister: Callable[..., Any], labels: dict[str, str]) -> Informer:
        def list_all() -> tuple[list[Mapping[str, Any]], str | None]:
            return self.api.list_versioned(kind, lister, self.selector)

        def watch(version: str | None) -> Any:
            return self.api.watch(lister, version)

        informer = Informer(kind, list_all, watch, labels, self._notify)
        informer.start()
        return informer
