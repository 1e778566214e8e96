"""Kubernetes resource quantities ("512Mi", "1Gi", "500m") as numbers, for every backend."""

from __future__ import annotations

import re
from decimal import Decimal

from controller.errors import InputError

MEMORY_FORMS = "plain bytes (536870912), Ki/Mi/Gi/Ti (512Mi) or K/M/G/T (512M)"
CPU_FORMS = 'cores ("1", "1.5") or millicores ("500m")'

_MEMORY_SUFFIXES: dict[str, int] = {
    "": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
}  # fmt: skip
_MEMORY_PATTERN = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(Ki|Mi|Gi|Ti|k|K|M|G|T)?\s*$")
_CPU_PATTERN = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(m)?\s*$")


def memory_bytes(value: str | int) -> int:
    """A memory quantity ("512Mi", "1G", "1048576") in bytes; InputError names the forms."""
    match = _MEMORY_PATTERN.match(str(value))
    if match is None:
        raise InputError(
            f"memory {value!r} is not a quantity",
            hint=f"write memory as {MEMORY_FORMS}",
            field="resources.memory",
        )
    number, suffix = match.groups()
    return int(Decimal(number) * _MEMORY_SUFFIXES[suffix or ""])


def nano_cpus(value: str | int | float) -> int:
    """A cpu quantity ("500m", "1.5", "2") in nano-CPUs (1 core = 10**9); must be positive."""
    match = _CPU_PATTERN.match(str(value))
    nano = 0
    if match is not None:
        number, milli = match.groups()
        nano = int(Decimal(number) / (1000 if milli else 1) * 10**9)
    if nano <= 0:
        raise InputError(
            f"cpu {value!r} is not a positive cpu quantity",
            hint=f"write cpu as {CPU_FORMS}",
            field="resources.cpu",
        )
    return nano
