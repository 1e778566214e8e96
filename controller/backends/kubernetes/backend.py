"""The `kubernetes` backend: one batch/v1 Job per sandbox, found again by label.

The official client is imported only in this module, and only when a method first
needs the cluster: constructing the backend and `render` work offline (`--dry-run`).
Status comes from Job conditions and the Pod's container states (kept by informers,
`kubernetes_informer.py`), logs from pods/log. API calls go through `KubeCalls`
(`kubernetes_calls.py`): only what is known to be transient is retried; anything else
raises BackendError at once, chained, with a hint (a 403 names the RBAC verb and
resource to grant).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from controller.backends.base import Backend, Notify, Observed, SandboxSpec
from controller.backends.kubernetes.api import (
    KubernetesApiError,
    body_bytes,
    json_of,
)
from controller.backends.kubernetes.calls import KubeCalls
from controller.backends.kubernetes.informer import Informer
from controller.backends.kubernetes.job import (
    CONTAINER_NAME,
    build_job,
    build_secret,
    secret_name,
)
from controller.backends.kubernetes.job_status import (
    CONFIG_ERROR_GRACE_S,
    attempt_key,
    object_name,
    observe_job,
    pod_order,
)
from controller.errors import BackendError, NotFoundError, UnavailableError
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
        self.api = KubeCalls(self.namespace, self.selector, **api)
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
        batch, _ = self.api.apis()
        try:
            job = json_of(
                self.api.call("create", "jobs", batch.create_namespaced_job, self.namespace, body)
            )
        except KubernetesApiError as e:
            if e.status != 409:
                raise
            held = self._job_of_attempt(spec)
            if held is None:
                job = self._replace_earlier_attempt(batch, spec, body)
            else:
                # A create that reached the API before a restart or a lost answer.
                log.info(
                    "Job %s/%s (attempt %d) already exists; adopting it",
                    self.namespace,
                    spec.sandbox_id,
                    spec.env.attempt,
                )
                job = held
        self._create_secret(spec, job)
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
        if self._delete_job(sandbox_id):
            log.info("stopped Job %s/%s", self.namespace, sandbox_id)

    def remove(self, sandbox_id: str) -> None:
        """Delete the Job and its Pods (after the controller archived the logs)."""
        if self._delete_job(sandbox_id):
            log.info("removed Job %s/%s", self.namespace, sandbox_id)

    def read_logs(self, sandbox_id: str) -> bytes:
        """The newest Pod's output so far; empty while its container is still starting."""
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
        return body_bytes(response)

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

    # -- helpers ----------------------------------------------------------------------

    def _job_of_attempt(self, spec: SandboxSpec) -> dict[str, Any] | None:
        """The Job named like the sandbox if it is this very attempt's, else None."""
        batch, _ = self.api.apis()
        try:
            existing = json_of(
                self.api.call(
                    "get", "jobs", batch.read_namespaced_job, spec.sandbox_id, self.namespace
                )
            )
        except KubernetesApiError as e:
            if e.status == 404:  # deleted in between
                return None
            raise
        labels = (existing.get("metadata") or {}).get("labels") or {}
        return existing if labels.get(LABEL_ATTEMPT) == str(spec.env.attempt) else None

    # The Secret is created after its Job, because it names the Job as its owner by the uid
    # the API server gives the Job on create; the garbage collector then deletes it with the
    # Job, however the Job goes (the controller, its TTL, a person). A Pod scheduled before
    # the Secret exists waits for its volume and the kubelet retries the mount, so a Secret
    # created a moment later is simply picked up. The other order (Secret, Job, then
    # patching the owner in) costs a third write per launch and leaves an unowned Secret when
    # the controller stops between the writes; this order leaves a Job whose Pod waits until
    # its activeDeadlineSeconds (the template's timeout) ends it, and a retry makes both anew.
    def _create_secret(self, spec: SandboxSpec, job: Mapping[str, Any]) -> None:
        """Create the sandbox's Secret, owned by `job`; on failure delete the Job and raise."""
        _, core = self.api.apis()
        try:
            body = build_secret(spec, self.namespace, job)
            try:
                self.api.call(
                    "create", "secrets", core.create_namespaced_secret, self.namespace, body
                )
            except KubernetesApiError as e:
                if e.status != 409:
                    raise
                self._replace_leftover_secret(spec, body)
        except BackendError as e:
            log.warning(
                "cannot create Secret %s/%s; deleting its Job so no half-made sandbox stays",
                self.namespace,
                secret_name(spec.sandbox_id),
            )
            self._delete_quietly("jobs", spec.sandbox_id)
            raise BackendError(
                f"cannot launch sandbox {spec.sandbox_id}: its Secret was not created "
                f"({e.message}); its Job was deleted",
                hint=e.hint,
                transient=e.transient,
            ) from e

    def _replace_leftover_secret(self, spec: SandboxSpec, body: dict[str, Any]) -> None:
        """A Secret holds the name: replace it if it is this sandbox's (a Secret is immutable,
        so delete and create), refuse to touch anyone else's."""
        _, core = self.api.apis()
        name = secret_name(spec.sandbox_id)
        try:
            existing = json_of(
                self.api.call("get", "secrets", core.read_namespaced_secret, name, self.namespace)
            )
        except KubernetesApiError as e:
            if e.status != 404:  # 404: deleted in between, so the name is free again
                raise
        else:
            labels = (existing.get("metadata") or {}).get("labels") or {}
            if (
                labels.get(LABEL_MANAGED_BY) != LABEL_MANAGED_BY_VALUE
                or labels.get(LABEL_SANDBOX_ID) != spec.sandbox_id
            ):
                raise KubernetesApiError(
                    f"Secret {self.namespace}/{name} exists and is not sandbox "
                    f"{spec.sandbox_id}'s (it lacks SIMPLE's labels), so it was left alone",
                    status=409,
                    hint="rename or delete that Secret, or run SIMPLE in a namespace of its own",
                )
            self._delete_quietly("secrets", name)
        self.api.call("create", "secrets", core.create_namespaced_secret, self.namespace, body)

    def _replace_earlier_attempt(
        self, batch: Any, spec: SandboxSpec, body: dict[str, Any]
    ) -> dict[str, Any]:
        """An earlier attempt's leftover holds the name: delete it and create once more."""
        log.info(
            "replacing a leftover Job %s/%s with attempt %d",
            self.namespace,
            spec.sandbox_id,
            spec.env.attempt,
        )
        self._delete_job(spec.sandbox_id)
        try:
            return json_of(
                self.api.call("create", "jobs", batch.create_namespaced_job, self.namespace, body)
            )
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
        """Delete the Job (its Pods in the background) and its Secret; False if no Job was
        there. The garbage collector deletes the Secret with the Job anyway: deleting it here
        too means a token never outlives its sandbox by the collector's delay."""
        batch, _ = self.api.apis()
        try:
            self.api.call(
                "delete",
                "jobs",
                batch.delete_namespaced_job,
                sandbox_id,
                self.namespace,
                propagation_policy="Background",
            )
        except KubernetesApiError as e:
            if e.status != 404:
                raise
            deleted = False
        else:
            deleted = True
        self._delete_quietly("secrets", secret_name(sandbox_id))
        return deleted

    def _delete_quietly(self, resource: str, name: str) -> None:
        """Delete a Job or Secret as a clean-up: gone already is fine, failing is a warning
        (the garbage collector, or the Job's deadline, still ends it)."""
        batch, core = self.api.apis()
        method = (
            core.delete_namespaced_secret if resource == "secrets" else batch.delete_namespaced_job
        )
        try:
            self.api.call(
                "delete", resource, method, name, self.namespace, propagation_policy="Background"
            )
        except KubernetesApiError as e:
            if e.status != 404:
                log.warning(
                    "could not delete %s %s/%s: %s", resource, self.namespace, name, e.message
                )

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
