"""What the Docker engine's failures mean to SIMPLE: whether retrying may help, and the
BackendError (or UnavailableError) each becomes, naming the call and what to do.

Imported by `backend` only after its check that the `docker` package is installed.
"""

from __future__ import annotations

import requests
from docker.errors import APIError, ImageNotFound, NotFound

from controller.backends.base import SandboxSpec
from controller.errors import BackendError, UnavailableError

ENGINE_HINT = "start the Docker engine, or point DOCKER_HOST at it; the controller needs its socket"
IMAGE_HINT = "build it with `make images` or set the template's image"


def is_transient(error: Exception) -> bool:
    """Whether retrying may help: lost connections, timeouts, engine-side 5xx, busy names."""
    if isinstance(error, requests.ConnectionError | requests.Timeout):
        return True
    if isinstance(error, APIError):
        status = error.status_code
        return status is not None and (status >= 500 or status in (408, 409, 429))
    return False


def describe(error: Exception) -> str:
    """The engine's own explanation of `error`, or the error's text."""
    if isinstance(error, APIError) and error.explanation:
        return str(error.explanation)
    return str(error) or type(error).__name__


def unreachable(error: Exception) -> UnavailableError:
    """The engine did not answer at all."""
    return UnavailableError(f"Docker engine unreachable: {describe(error)}", hint=ENGINE_HINT)


def engine_call_error(action: str, error: Exception, hint: str | None = None) -> BackendError:
    """`action` failed on the engine: transient or not, with a hint when one is known."""
    transient = is_transient(error)
    if hint is None and isinstance(error, requests.RequestException):
        hint = ENGINE_HINT
    return BackendError(
        f"Docker could not {action}: {describe(error)}", hint=hint, transient=transient
    )


def launch_error(spec: SandboxSpec, step: str, error: Exception) -> BackendError:
    """Creating or starting (`step`) the sandbox's container failed."""
    if isinstance(error, ImageNotFound):
        return BackendError(
            f"cannot launch sandbox {spec.sandbox_id}: image {spec.image!r} not found "
            "on the Docker engine",
            hint=IMAGE_HINT,
            transient=False,
        )
    hint = None
    if isinstance(error, NotFound) and "network" in describe(error):
        hint = "create the network or fix SIMPLE_DOCKER_NETWORK"
    return engine_call_error(f"{step} container for sandbox {spec.sandbox_id}", error, hint)
