"""Kubernetes resource quantities ("512Mi", "1Gi", "500m") as numbers."""

from __future__ import annotations

import re

from controller.errors import InputError

_MEMORY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|K|M|G|T)?$")
_FACTORS = {
    None: 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_CPU = re.compile(r"^([0-9]+)m$|^([0-9]+(?:\.[0-9]+)?)$")


def memory_bytes(quantity: str) -> int:
    """ "512Mi" -> 536870912. Raises InputError naming the accepted forms."""
    match = _MEMORY.match(quantity.strip())
    if not match:
        raise InputError(
            f"memory {quantity!r} is not a quantity",
            hint='use bytes or a suffix: "512Mi", "1Gi", "500M"',
            field="resources.memory",
        )
    return int(float(match.group(1)) * _FACTORS[match.group(2)])


def cpu_cores(quantity: str) -> float:
    """ "500m" -> 0.5, "2" -> 2.0."""
    match = _CPU.match(quantity.strip())
    if not match:
        raise InputError(
            f"cpu {quantity!r} is not a quantity",
            hint='use "500m", "1" or "1.5"',
            field="resources.cpu",
        )
    return int(match.group(1)) / 1000 if match.group(1) else float(match.group(2))
