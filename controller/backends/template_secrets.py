"""The values of a template's secrets for the Docker and process backends, read at launch
from the controller's secret store: SIMPLE_TEMPLATE_SECRETS_DIR/<name>/<key>, the layout of
a mounted Kubernetes Secret. Only the launch holds them; nothing records them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from controller.errors import BackendError

MAX_SECRET_BYTES = 64 * 1024
_PART = re.compile(r"^[-._a-zA-Z0-9]+$")


def resolve(refs: Sequence[tuple[str, str, str]], directory: Path | None) -> dict[str, str]:
    """{as: value} for each (name, key, as); BackendError (not transient) naming what is
    missing, never its value."""
    if not refs:
        return {}
    if directory is None:
        raise BackendError(
            f"the template needs secrets ({', '.join(a for _, _, a in refs)}) and "
            "SIMPLE_TEMPLATE_SECRETS_DIR is not set",
            hint="point SIMPLE_TEMPLATE_SECRETS_DIR at a directory of <name>/<key> files",
        )
    values: dict[str, str] = {}
    for name, key, as_ in refs:
        if not (_PART.match(name) and _PART.match(key)) or ".." in (name, key):
            raise BackendError(f"secret reference {name!r}/{key!r} is not a plain name")
        path = directory / name / key
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_SECRET_BYTES + 1)
        except OSError as e:
            raise BackendError(
                f"secret {name}/{key} (for {as_}) cannot be read under "
                f"SIMPLE_TEMPLATE_SECRETS_DIR: {type(e).__name__}",
                hint=f"create {directory}/{name}/{key}",
            ) from None
        if len(data) > MAX_SECRET_BYTES:
            raise BackendError(f"secret {name}/{key} is over {MAX_SECRET_BYTES} bytes")
        values[as_] = data.decode("utf-8", "replace").rstrip("\n")
    return values
