"""Reading a sandbox's Job back (pure): what a batch/v1 Job and its Pods say about one
attempt, as an `Observed`: ended (how, and why, with a hint for what to fix), pending
or running. Also how Jobs and Pods are matched, by their labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from controller.backends.base import Observed, ObservedState
from controller.backends.kubernetes.job import CONTAINER_NAME
from sandbox_image.contract import (
    LABEL_ATTEMPT,
    LABEL_CONTROLLER,
    LABEL_RUN_ID,
    LABEL_SANDBOX_ID,
)

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
    ended = _ended(job, pod)
    if ended is not None:
        return seen(ObservedState.EXITED, **ended)
    if pod is None:
        return seen(ObservedState.PENDING)
    stuck = _stuck(pod, now, unschedulable_grace_s, config_error_grace_s)
    if stuck is not None:
        return seen(ObservedState.EXITED, reason=stuck)
    if (pod.get("status") or {}).get("phase") == "Pending":
        return seen(ObservedState.PENDING)
    # Running, or ended and waiting for the Job controller to set its condition.
    return seen(ObservedState.RUNNING)


def _ended(job: Mapping[str, Any], pod: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """How the attempt ended, by the Job's Complete or Failed condition (as `Observed`
    fields); None while the Job has neither."""
    terminated = _container_state(pod, "terminated")
    conditions = {
        c.get("type"): c
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }
    if "Complete" in conditions:
        return {"exit_code": 0, "exited_at": _exited_at(terminated, conditions["Complete"])}
    if "Failed" not in conditions:
        return None
    failed = conditions["Failed"]
    exit_code = _as_int(terminated.get("exitCode"))
    exited_at = _exited_at(terminated, failed)
    if failed.get("reason") == "DeadlineExceeded":
        return {"exit_code": exit_code, "deadline_exceeded": True, "exited_at": exited_at}
    if terminated:
        return {"exit_code": exit_code, "exited_at": exited_at,
                "oom_killed": terminated.get("reason") == "OOMKilled"}
    return {"exited_at": exited_at,
            "reason": _describe(failed.get("reason", "Failed"), failed.get("message"))}


def _stuck(pod: Mapping[str, Any], now: float, unschedulable_grace_s: float,
           config_error_grace_s: float) -> str | None:
    """Why the Pod will never run on its own (with a hint of what to fix), or None: an image
    that cannot be pulled, a container config the kubelet refuses, no node that fits."""
    waiting = _container_state(pod, "waiting")
    if waiting.get("reason") in IMAGE_PULL_REASONS:
        return _describe(waiting["reason"], waiting.get("message"), IMAGE_PULL_HINT)
    created = _timestamp((pod.get("metadata") or {}).get("creationTimestamp"))
    if (
        waiting.get("reason") == CONFIG_ERROR_REASON
        and created is not None
        and now - created >= config_error_grace_s
    ):
        return _describe(CONFIG_ERROR_REASON, waiting.get("message"), CONFIG_ERROR_HINT)
    unschedulable = _unschedulable_since(pod)
    if unschedulable is not None and now - unschedulable[0] >= unschedulable_grace_s:
        return _describe("Unschedulable", unschedulable[1], UNSCHEDULABLE_HINT)
    return None


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
