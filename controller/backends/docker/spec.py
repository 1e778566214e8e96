"""The container a sandbox runs in, as docker SDK arguments. Pure: no I/O.

`build_container_spec` turns a `SandboxSpec` into the keyword arguments of
`client.containers.create(...)`: the contract's environment and labels, and a
locked-down container (non-root, read-only root filesystem, no capabilities,
no privilege escalation, memory without swap, cpu and pids limits). The docker
backend's `launch` and `render` (for `--dry-run`) both use it, so what is
printed is what is started.
"""

from __future__ import annotations

from typing import Any

from controller.backends.base import Resources, SandboxSpec
from controller.catalog.quantities import MEMORY_FORMS, memory_bytes, nano_cpus
from controller.errors import InputError

WORK_DIR = "/work"
# tmpfs mounts: the only writable places. Their pages count against the memory limit.
TMPFS_MOUNTS: dict[str, str] = {
    WORK_DIR: "rw,size=64m,mode=1777",
    "/tmp": "rw,size=16m,mode=1777",
}
DOCKER_MIN_MEMORY_BYTES = 6 * 1024 * 1024  # the engine refuses smaller limits
LOG_FILES = 2  # json-file rotation: the engine keeps at most this many files of output


def log_options(budget: int) -> dict[str, Any]:
    """The engine's own bound on a container's output: json-file rotated at half the log
    budget, two files kept (the latest output; SIMPLE's budget then keeps head and tail of
    what the engine kept)."""
    size_k = max(budget // LOG_FILES // 1024, 1)
    return {"type": "json-file", "config": {"max-size": f"{size_k}k", "max-file": str(LOG_FILES)}}


def parse_memory(value: str | int) -> int:
    """A Kubernetes memory quantity in bytes, at least what Docker accepts."""
    size = memory_bytes(value)
    if size < DOCKER_MIN_MEMORY_BYTES:
        raise InputError(
            f"memory {value!r} is below the 6Mi that Docker accepts",
            hint=f"give at least 6Mi, as {MEMORY_FORMS}",
            field="resources.memory",
        )
    return size


def parse_cpu(value: str | int | float) -> int:
    """A Kubernetes cpu quantity ("500m", "1.5", "2") in nano-CPUs (1 core = 10**9)."""
    return nano_cpus(value)


def resource_limits(resources: Resources) -> dict[str, Any]:
    """Memory (no swap), cpu and pids limits as docker SDK arguments."""
    limits: dict[str, Any] = {"pids_limit": resources.pids}
    if resources.memory is not None:
        memory = parse_memory(resources.memory)
        # memswap == mem: the container gets no swap, so exceeding memory is an OOM kill.
        limits["mem_limit"] = memory
        limits["memswap_limit"] = memory
    if resources.cpu is not None:
        limits["nano_cpus"] = parse_cpu(resources.cpu)
    return limits


def tmpfs_mounts(user: str) -> dict[str, str]:
    """The writable tmpfs mounts; /work belongs to the runtime user when it is numeric.

    The engine gives a tmpfs over an existing image directory that directory's mode
    (e.g. 0755, not our 1777), so ownership is what makes /work writable.
    """
    uid, _, gid = user.partition(":")
    owner = "".join(
        f",{key}={value}" for key, value in (("uid", uid), ("gid", gid)) if value.isdigit()
    )
    return {**TMPFS_MOUNTS, WORK_DIR: TMPFS_MOUNTS[WORK_DIR] + owner}


def build_container_spec(
    spec: SandboxSpec,
    *,
    user: str = "10001:10001",
    network: str | None = None,
    log_budget: int = 16 * 1024 * 1024,
) -> dict[str, Any]:
    """`containers.create(**kwargs)` arguments for one sandbox attempt.

    `user` is "uid:gid" (Settings.docker_runtime_user); `network` is a network
    mode or user network name (Settings.docker_network), None for the default bridge;
    `log_budget` is Settings.log_budget, the engine's log rotation follows it.
    """
    kwargs: dict[str, Any] = {
        "name": spec.sandbox_id,
        "image": spec.image,
        # An empty command means the image's own CMD.
        "command": list(spec.command) or None,
        "environment": spec.env.to_environ(),
        "labels": spec.labels,
        "detach": True,
        "user": user,
        "working_dir": WORK_DIR,
        "read_only": True,
        "tmpfs": tmpfs_mounts(user),
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        # A tiny init reaps zombies and forwards SIGTERM to the runtime.
        "init": True,
        # Kept after exit: the exit code, OOM flag and logs are read before `remove`.
        "auto_remove": False,
        # The engine rotates the output: a flood cannot fill the host's disk.
        "log_config": log_options(log_budget),
        **resource_limits(spec.resources),
    }
    if network is not None:
        kwargs["network_mode"] = network
    return kwargs
