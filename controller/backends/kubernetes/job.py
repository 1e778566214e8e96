"""The pure Job data of the `kubernetes` backend: a SandboxSpec in, a batch/v1 Job out,
and a Job with its Pods read back as an `Observed`.

No I/O and no `kubernetes` import: `simplectl run --dry-run` renders Jobs offline,
and both directions are tested as plain data. The Job is named by the sandbox id (so
`kubectl logs job/<sandbox-id>` works), carries the labels of docs/architecture.md on itself and
its Pod, and runs under the restricted Pod Security Standard with a read-only root
filesystem; only /work (the working dir) and /tmp are writable. What grants access (the
sandbox token and the signed URLs) is not in the Job: it goes into a per-sandbox Secret
owned by the Job (`build_secret`), mounted read-only as files (SIMPLE_SECRETS_DIR).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from controller.backends.base import Observed, ObservedState, Resources, SandboxSpec
from controller.errors import BackendError, InputError
from sandbox_image.contract import (
    CREDENTIAL_NAMES,
    ENV_SECRETS_DIR,
    LABEL_ATTEMPT,
    LABEL_CONTROLLER,
    LABEL_RUN_ID,
    LABEL_SANDBOX_ID,
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

# Kubernetes' own quantity grammar (k8s.io/apimachinery resource.Quantity), non-negative.
_QUANTITY = re.compile(
    r"^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")

IMAGE_PULL_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName"})
IMAGE_PULL_HINT = (
    "check the template's image name and tag, that the cluster's nodes can reach its "
    "registry, and, for a private registry, the sandbox ServiceAccount's imagePullSecrets "
    "(chart value sandbox.serviceAccount.imagePullSecrets)"
)
CONFIG_ERROR_REASON = "CreateContainerConfigError"
CONFIG_ERROR_HINT = (
    "the kubelet cannot create the container from its configuration, most often an image "
    "whose user is root: sandboxes run as non-root (give the image a numeric USER, e.g. "
    "10001)"
)
CONFIG_ERROR_GRACE_S = 120.0  # the kubelet retries every ~10 s
UNSCHEDULABLE_HINT = (
    "no node can fit the sandbox: lower the template's resources (cpu, memory), "
    "add nodes, or check taints and the namespace's ResourceQuota"
)


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
        ],
    }


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


# -- reading a Job back (pure) ---------------------------------------------------------


def observe_job(
    job: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    now: float,
    unschedulable_grace_s: float,
    config_error_grace_s: float = CONFIG_ERROR_GRACE_S,
) -> Observed | None:
    """What a Job and its Pods say about one attempt; None for a Job without our labels."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    sandbox_id, run_id = labels.get(LABEL_SANDBOX_ID), labels.get(LABEL_RUN_ID)
    if not sandbox_id or not run_id:
        return None
    attempt = _as_int(labels.get(LABEL_ATTEMPT)) or 1

    def seen(state: ObservedState, **details: Any) -> Observed:
        return Observed(
            sandbox_id=sandbox_id,
            run_id=run_id,
            attempt=attempt,
            state=state,
            controller_id=labels.get(LABEL_CONTROLLER),
            **details,
        )

    pod = max(pods, key=pod_order, default=None)
    terminated = _container_state(pod, "terminated")
    conditions = {
        c.get("type"): c
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }
    if "Complete" in conditions:
        return seen(
            ObservedState.EXITED,
            exit_code=0,
            exited_at=_exited_at(terminated, conditions["Complete"]),
        )
    if "Failed" in conditions:
        failed = conditions["Failed"]
        exit_code = _as_int(terminated.get("exitCode"))
        exited_at = _exited_at(terminated, failed)
        if failed.get("reason") == "DeadlineExceeded":
            return seen(
                ObservedState.EXITED,
                exit_code=exit_code,
                deadline_exceeded=True,
                exited_at=exited_at,
            )
        if terminated:
            return seen(
                ObservedState.EXITED,
                exit_code=exit_code,
                exited_at=exited_at,
                oom_killed=terminated.get("reason") == "OOMKilled",
            )
        return seen(
            ObservedState.EXITED,
            exited_at=exited_at,
            reason=_describe(failed.get("reason", "Failed"), failed.get("message")),
        )
    if pod is None:
        return seen(ObservedState.PENDING)
    waiting = _container_state(pod, "waiting")
    if waiting.get("reason") in IMAGE_PULL_REASONS:
        return seen(
            ObservedState.EXITED,
            reason=_describe(waiting["reason"], waiting.get("message"), IMAGE_PULL_HINT),
        )
    created = _timestamp((pod.get("metadata") or {}).get("creationTimestamp"))
    if (
        waiting.get("reason") == CONFIG_ERROR_REASON
        and created is not None
        and now - created >= config_error_grace_s
    ):
        return seen(
            ObservedState.EXITED,
            reason=_describe(CONFIG_ERROR_REASON, waiting.get("message"), CONFIG_ERROR_HINT),
        )
    unschedulable = _unschedulable_since(pod)
    if unschedulable is not None and now - unschedulable[0] >= unschedulable_grace_s:
        return seen(
            ObservedState.EXITED,
            reason=_describe("Unschedulable", unschedulable[1], UNSCHEDULABLE_HINT),
        )
    if (pod.get("status") or {}).get("phase") == "Pending":
        return seen(ObservedState.PENDING)
    # Running, or ended and waiting for the Job controller to set its condition.
    return seen(ObservedState.RUNNING)


def _container_state(pod: Mapping[str, Any] | None, which: str) -> dict[str, Any]:
    """The sandbox container's `waiting` / `running` / `terminated` state, or {}."""
    if pod is None:
        return {}
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER_NAME:
            return dict((status.get("state") or {}).get(which) or {})
    return {}


def _exited_at(terminated: Mapping[str, Any], condition: Mapping[str, Any]) -> float | None:
    """When the sandbox ended: its container's finish, else when the Job's condition turned."""
    return _timestamp(terminated.get("finishedAt")) or _timestamp(
        condition.get("lastTransitionTime")
    )


def _unschedulable_since(pod: Mapping[str, Any]) -> tuple[float, str | None] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            since = _timestamp(condition.get("lastTransitionTime"))
            return (since if since is not None else 0.0), condition.get("message")
    return None


def _describe(reason: str, message: str | None, hint: str | None = None) -> str:
    text = f"{reason}: {message}" if message else reason
    return f"{text} (hint: {hint})" if hint else text


def attempt_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(sandbox id, attempt) from a Job's or Pod's labels: how Pods are matched to Jobs."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_SANDBOX_ID, ""), labels.get(LABEL_ATTEMPT, "")


def pod_order(pod: Mapping[str, Any]) -> tuple[int, float]:
    """Newest last: the highest attempt, then the latest creation (a disrupted pod's successor)."""
    meta = pod.get("metadata") or {}
    attempt = _as_int((meta.get("labels") or {}).get(LABEL_ATTEMPT)) or 0
    return attempt, _timestamp(meta.get("creationTimestamp")) or 0.0


def object_name(obj: Mapping[str, Any]) -> str:
    """metadata.name of an API object (a dict as the server sent it)."""
    return str((obj.get("metadata") or {}).get("name", ""))


def _timestamp(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _as_int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
