"""How Docker sandboxes reach the controller on Linux with no settings.

The default: a user-defined bridge network `simple` that SIMPLE creates once and labels
as its own. Its gateway address belongs to the host, so the controller also listens
there and sandboxes get `http://<gateway>:<port>` as SIMPLE_CONTROLLER_URL. That
listener serves only the sandbox routes (see `controller.api.listeners`), never the API.

`SIMPLE_DOCKER_NETWORK=host`, an explicit network, or an explicit SIMPLE_CONTROLLER_URL
turn this off: then the user says how sandboxes reach the controller.

Also here: connecting to the engine with one clear line per failure (engine down,
permission denied on its socket) and checking that images are present.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from controller.errors import ConfigError, InputError, UnavailableError
from controller.extras import require_extra
from sandbox_image.contract import LABEL_MANAGED_BY, LABEL_MANAGED_BY_VALUE

if TYPE_CHECKING:
    from controller.settings import Settings

logger = logging.getLogger(__name__)

DEFAULT_NETWORK = "simple"
CLIENT_TIMEOUT_S = 30
START_HINT = "start Docker (`sudo systemctl start docker`) or point DOCKER_HOST at a running engine"
PERMISSION_HINT = (
    "add yourself to the docker group (`sudo usermod -aG docker $USER`, then log in again) "
    "or run with access to the socket"
)
IMAGE_HINT = "build the SIMPLE images with `make images` (see docs/docker.md), or set the image"


def wants_default_network(settings: Settings) -> bool:
    """Docker backend, no network and no controller URL chosen: SIMPLE sets up the way."""
    return (
        settings.backend == "docker"
        and not settings.docker_network
        and not settings.controller_url
    )


def connect(timeout_s: float = CLIENT_TIMEOUT_S) -> Any:
    """A pinged DockerClient, or one line saying what to do."""
    require_extra("docker", "the docker backend")
    from docker.client import DockerClient
    from docker.errors import DockerException

    try:
        client = DockerClient.from_env(timeout=int(timeout_s))
        client.ping()
    except (DockerException, OSError) as e:
        raise engine_error(e) from None
    return client


def engine_error(error: BaseException) -> UnavailableError:
    """The engine could not be used: permission denied, or not running / unreachable."""
    text = str(error)
    if "Permission denied" in text or isinstance(error, PermissionError):
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        return UnavailableError(
            f"permission denied on the Docker socket ({where.removeprefix('unix://')})",
            hint=PERMISSION_HINT,
        )
    return UnavailableError("the Docker engine is not reachable", hint=START_HINT)


def ensure_network(client: Any, name: str = DEFAULT_NETWORK) -> str:
    """The gateway address of bridge network `name`, created (labelled) when missing."""
    from docker.errors import APIError

    network = _find(client, name)
    if network is None:
        try:
            network = client.networks.create(
                name,
                driver="bridge",
                labels={LABEL_MANAGED_BY: LABEL_MANAGED_BY_VALUE},
                check_duplicate=True,
            )
            logger.info("created Docker network %s", name)
        except APIError as e:
            network = _find(client, name)  # created by another controller meanwhile
            if network is None:
                raise UnavailableError(
                    f"cannot create Docker network {name!r}: {e.explanation or e}",
                    hint="create it yourself with `docker network create simple`, or set "
                    "SIMPLE_DOCKER_NETWORK and SIMPLE_CONTROLLER_URL",
                ) from None
        network.reload()
    return gateway_of(network.attrs, name)


def _find(client: Any, name: str) -> Any:
    for network in client.networks.list(names=[name]):
        if network.name == name:
            return network
    return None


def gateway_of(attrs: dict[str, Any], name: str) -> str:
    """The first IPv4 gateway in a network's IPAM config."""
    if attrs.get("Driver") != "bridge":
        raise ConfigError(
            f"Docker network {name!r} is not a bridge network ({attrs.get('Driver')})",
            hint="remove it, or set SIMPLE_DOCKER_NETWORK and SIMPLE_CONTROLLER_URL yourself",
        )
    for config in (attrs.get("IPAM") or {}).get("Config") or []:
        gateway = config.get("Gateway")
        if gateway and ipaddress.ip_address(gateway).version == 4:
            return str(gateway)
    raise ConfigError(
        f"Docker network {name!r} has no IPv4 gateway",
        hint="recreate it with `docker network rm simple` (SIMPLE makes it again)",
    )


def require_images(client: Any, images: Iterable[str]) -> None:
    """Every image is present in the engine (sandboxes never pull); else one line."""
    from docker.errors import DockerException, ImageNotFound

    for image in sorted(set(images)):
        try:
            client.images.get(image)
        except ImageNotFound:
            message = f"image {image} is not in the Docker engine"
            raise InputError(message, hint=IMAGE_HINT) from None
        except (DockerException, OSError) as e:
            raise engine_error(e) from None
