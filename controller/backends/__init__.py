"""Backends: how sandboxes are started. Each lives in its own module, loaded on demand."""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller.errors import ConfigError
from controller.extras import require_extra

if TYPE_CHECKING:
    from controller.backends.base import Backend, Notify
    from controller.settings import Settings


def create_backend(settings: Settings, notify: Notify | None = None) -> Backend:
    """The backend `settings.backend` names; heavy clients are imported only here."""
    if settings.backend == "process":
        from controller.backends.process.backend import ProcessBackend

        return ProcessBackend(settings, notify)
    if settings.backend == "docker":
        require_extra("docker", "the docker backend")
        from controller.backends.docker.backend import DockerBackend

        return DockerBackend(settings, notify)
    if settings.backend == "kubernetes":
        require_extra("kubernetes", "the kubernetes backend")
        from controller.backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend(settings, notify)
    raise ConfigError(
        f"unknown backend {settings.backend!r}",
        hint="set SIMPLE_BACKEND to process, docker or kubernetes",
    )
