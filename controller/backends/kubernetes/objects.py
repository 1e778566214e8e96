"""Writing a sandbox's Kubernetes objects: its Job (this very attempt's adopted, an earlier
attempt's replaced) and its Secret (created after the Job, owned by it), and deleting
both. Every call goes through `KubeCalls`, in one namespace.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from controller.backends.base import SandboxSpec
from controller.backends.kubernetes.api import KubernetesApiError, json_of
from controller.backends.kubernetes.calls import KubeCalls
from controller.backends.kubernetes.job import build_secret, secret_name
from controller.errors import BackendError
from sandbox_image.contract import (
    LABEL_ATTEMPT,
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_SANDBOX_ID,
)

log = logging.getLogger(__name__)


class SandboxObjects:
    """Creates and deletes sandboxes' Jobs and Secrets in `namespace` through `api`."""

    def __init__(self, api: KubeCalls, namespace: str) -> None:
        self.api = api
        self.namespace = namespace

    def create_job(self, spec: SandboxSpec, body: dict[str, Any]) -> dict[str, Any]:
        """Create the attempt's Job from `body`; the same attempt's Job is adopted, an
        earlier attempt's replaced. Returns the Job as the API server has it."""
        batch, _ = self.api.apis()
        try:
            return json_of(
                self.api.call("create", "jobs", batch.create_namespaced_job, self.namespace, body)
            )
        except KubernetesApiError as e:
            if e.status != 409:
                raise
            held = self._job_of_attempt(spec)
            if held is None:
                return self._replace_earlier_attempt(batch, spec, body)
            # A create that reached the API before a restart or a lost answer.
            log.info(
                "Job %s/%s (attempt %d) already exists; adopting it",
                self.namespace,
                spec.sandbox_id,
                spec.env.attempt,
            )
            return held

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
    def create_secret(self, spec: SandboxSpec, job: Mapping[str, Any]) -> None:
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
        self.delete_job(spec.sandbox_id)
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

    def delete_job(self, sandbox_id: str) -> bool:
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
