"""The pure Job data of the `kubernetes` backend: a SandboxSpec in, a batch/v1 Job (and the
sandbox's Secret) out. Reading a Job back is `job_status`.

No I/O and no `kubernetes` import: `simplectl run --dry-run` renders Jobs offline,
and they are tested as plain data. The Job is named by the sandbox id (so
`kubectl logs job/<sandbox-id>` works), carries the labels of docs/architecture.md on itself and
its Pod, and runs under the restricted Pod Security Standard with a read-only root
filesystem; only /work (the working dir) and /tmp are writable. What grants access (the
sandbox token and the signed URLs) is not in the Job: it goes into a per-sandbox Secret
owned by the Job (`build_secret`), mounted read-only as files (SIMPLE_SECRETS_DIR).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from controller.backends.base import Resources, SandboxSpec
from controller.errors import BackendError, InputError
from sandbox_image.contract import (
    CREDENTIAL_NAMES,
    ENV_SECRETS_DIR,
    ENV_TEMPLATE_SECRETS_DIR,
    SANDBOX_ID_PATTERN,
)

CONTAINER_NAME = "sandbox"
RUNTIME_UID = 10001  # the uid of Dockerfile.sandbox's user; any image must run as non-root
WORK_DIR = "/work"
TMP_DIR = "/tmp"
# Bounded scratch space, so a runaway sandbox cannot fill the node's disk.
WORK_SIZE_LIMIT = "2Gi"
TMP_SIZE_LIMIT = "512Mi"
# The variables that grant access: the token authorizes the sandbox's routes, the URLs
# carry signatures (or presigned S3 credentials). Anyone who may read Jobs (or Pods) in the
# namespace would otherwise read them; they live in the sandbox's own Secret instead.
# The container reads them as files (SIMPLE_SECRETS_DIR), never from its environment,
# which child processes inherit and /proc shows.
SECRET_ENV_NAMES = frozenset(CREDENTIAL_NAMES)
SECRET_SUFFIX = "-env"
SECRETS_DIR = "/var/run/simple/credentials"
TEMPLATE_SECRETS_DIR = "/var/run/simple/template-secrets"

# Kubernetes' own quantity grammar (k8s.io/apimachinery resource.Quantity), non-negative.
_QUANTITY = re.compile(
    r"^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")



def build_job(
    spec: SandboxSpec, namespace: str, service_account: str, ttl_s: int
) -> dict[str, Any]:
    """The Job that runs one attempt of one sandbox. Raises InputError on a bad spec."""
    _check_spec(spec, ttl_s)
    labels = spec.labels
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": spec.sandbox_id, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            # The controller decides retries (a retry is a new Job), so the Job never retries.
            "backoffLimit": 0,
            "activeDeadlineSeconds": spec.timeout_s,
            "ttlSecondsAfterFinished": ttl_s,
            # A node drain or preemption is not the sandbox's failure: let the Job replace the pod.
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    }
                ]
            },
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": _pod_spec(spec, service_account),
            },
        },
    }


def _pod_spec(spec: SandboxSpec, service_account: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "workingDir": WORK_DIR,
        "env": _env(spec),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": RUNTIME_UID,
            "runAsGroup": RUNTIME_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "work", "mountPath": WORK_DIR},
            {"name": "tmp", "mountPath": TMP_DIR},
            {"name": "credentials", "mountPath": SECRETS_DIR, "readOnly": True},
        ],
        # The last log lines become the termination message when the sandbox fails.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if spec.command:
        container["command"] = list(spec.command)
    resources = _resources(spec.resources)
    if resources:
        container["resources"] = resources
    volumes = _template_secrets(spec, container)
    return {
        "restartPolicy": "Never",
        "serviceAccountName": service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUNTIME_UID,
            "runAsGroup": RUNTIME_UID,
            "fsGroup": RUNTIME_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": "work", "emptyDir": {"sizeLimit": WORK_SIZE_LIMIT}},
            {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}},
            # Files owned by root and the pod's fsGroup, readable by that group only.
            {"name": "credentials",
             "secret": {"secretName": secret_name(spec.sandbox_id), "defaultMode": 0o440}},
            *volumes,
        ],
    }


def _template_secrets(spec: SandboxSpec, container: dict[str, Any]) -> list[dict[str, Any]]:
    """The template's Secrets, by reference, as files named as the sandbox sees them in
    TEMPLATE_SECRETS_DIR: the kubelet mounts them; SIMPLE never reads a value."""
    if not spec.secrets:
        return []
    by_secret: dict[str, list[dict[str, str]]] = {}
    for name, key, as_ in spec.secrets:
        by_secret.setdefault(name, []).append({"key": key, "path": as_})
    container["volumeMounts"].append(
        {"name": "template-secrets", "mountPath": TEMPLATE_SECRETS_DIR, "readOnly": True})
    container["env"].append({"name": ENV_TEMPLATE_SECRETS_DIR, "value": TEMPLATE_SECRETS_DIR})
    sources = [{"secret": {"name": name, "items": items}} for name, items in by_secret.items()]
    return [{"name": "template-secrets", "projected": {"defaultMode": 0o440, "sources": sources}}]


def _env(spec: SandboxSpec) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    for name, value in spec.env.to_environ().items():
        if name not in SECRET_ENV_NAMES:
            env.append({"name": name, "value": value})
    env.append({"name": ENV_SECRETS_DIR, "value": SECRETS_DIR})
    # The root filesystem is read-only: tools that write under $HOME get the working dir.
    env.append({"name": "HOME", "value": WORK_DIR})
    return env


def secret_name(sandbox_id: str) -> str:
    """The name of the sandbox's Secret (a sandbox id has at most 63 characters, a Secret's
    name may have 253)."""
    return sandbox_id + SECRET_SUFFIX


def build_secret(spec: SandboxSpec, namespace: str, job: Mapping[str, Any]) -> dict[str, Any]:
    """The Secret holding the sandbox's SECRET_ENV_NAMES, owned by its created `job` (which
    must carry the uid the API server gave it): the garbage collector deletes the Secret
    with the Job, whether the controller, its TTL or a person deletes the Job."""
    meta = job.get("metadata") or {}
    if not meta.get("uid"):
        raise BackendError(
            f"the API server's answer for Job {meta.get('name')!r} has no uid, so the "
            "sandbox's Secret cannot name the Job as its owner",
            hint="check that the controller talks to a Kubernetes API server",
        )
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }
    values = spec.env.to_environ()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(spec.sandbox_id),
            "namespace": namespace,
            "labels": dict(spec.labels),
            "ownerReferences": [owner],
        },
        "type": "Opaque",
        # Each attempt has its own token: a retry replaces the Secret, never edits it.
        "immutable": True,
        "stringData": {name: values[name] for name in sorted(SECRET_ENV_NAMES) if name in values},
    }


def _resources(resources: Resources) -> dict[str, dict[str, str]]:
    """Requests equal to limits: a sandbox gets what it was planned with, no more, no less."""
    limits: dict[str, str] = {}
    for name, value in (("cpu", resources.cpu), ("memory", resources.memory)):
        if value is None:
            continue
        quantity = str(value).strip()
        if not _QUANTITY.match(quantity):
            raise InputError(
                f"{name} {value!r} is not a Kubernetes quantity",
                hint='write cpu as "500m" or "2" and memory as "512Mi" or "1Gi"',
                field=f"resources.{name}",
            )
        limits[name] = quantity
    if not limits:
        return {}
    return {"requests": dict(limits), "limits": dict(limits)}


def _check_spec(spec: SandboxSpec, ttl_s: int) -> None:
    if not SANDBOX_ID_PATTERN.match(spec.sandbox_id):
        raise InputError(
            f"sandbox id {spec.sandbox_id!r} cannot name a Kubernetes Job",
            hint="use at most 63 characters of [a-z0-9-], starting and ending alphanumeric",
            field="sandbox_id",
        )
    for key, value in spec.labels.items():
        if not _LABEL_VALUE.match(value):
            raise InputError(
                f"label {key}={value!r} is not a valid Kubernetes label value",
                hint="use at most 63 characters of [A-Za-z0-9-_.], starting and ending "
                "alphanumeric",
                field=key,
            )
    if not spec.image:
        raise InputError(
            "the sandbox has no image",
            hint="set the template's image or SIMPLE_DEFAULT_IMAGE",
            field="image",
        )
    if spec.timeout_s < 1:
        raise InputError(f"timeout_s {spec.timeout_s} must be at least 1", field="timeout_s")
    if ttl_s < 0:
        raise InputError(
            f"Job TTL {ttl_s} must not be negative",
            hint="set SIMPLE_KUBERNETES_JOB_TTL_S to 0 or more",
            field="kubernetes_job_ttl_s",
        )
