"""Process-backend sandboxes run below the controller's CPU priority (SIMPLE_PROCESS_NICE).

Each sandbox leads a session of its own, and with the kernel's autogroups (on by default)
every session is scheduled as one group: a process's nice value then weighs only inside
its group. So the sandbox's nice value and its session's group are both checked: with
only the first, sixteen busy sandboxes would each get as much CPU as the whole
controller, passes, API and exit path included.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.backends.process.backend import ProcessBackend
from controller.errors import NotFoundError
from controller.settings import Settings
from tests.backends.conftest import MakeSpec

AUTOGROUP = Path("/proc/self/autogroup")
# Prints its nice value and its session group's line ("/autogroup-123 nice 10").
PROBE = (
    "import os, pathlib\n"
    "print('NICE', os.getpriority(os.PRIO_PROCESS, 0), flush=True)\n"
    "group = pathlib.Path('/proc/self/autogroup')\n"
    "print('GROUP', group.read_text().strip() if group.exists() else '-', flush=True)\n"
)

BackendFactory = Callable[..., ProcessBackend]


@pytest.fixture
def backends(process_backends: BackendFactory) -> BackendFactory:
    def make(
        nice: int | None = None, user: str = "self", python: str | None = None
    ) -> ProcessBackend:
        extra = {} if nice is None else {"process_nice": nice}
        return process_backends(process_user=user, process_python=python, **extra)

    return make


def probe(backend: ProcessBackend, make_spec: MakeSpec, sandbox_id: str) -> tuple[int, str]:
    """The sandbox's nice value and its session group's line, as it printed them."""
    backend.launch(make_spec(sandbox_id, command=["python", "-c", PROBE]))
    deadline, logs = time.monotonic() + 30, b""
    while time.monotonic() < deadline:
        with contextlib.suppress(NotFoundError):  # the supervisor has not opened it yet
            logs = backend.read_logs(sandbox_id)
        found = re.search(rb"^NICE (-?\d+)\nGROUP (.*)$", logs, re.M)
        if found:
            return int(found[1]), found[2].decode()
        time.sleep(0.05)
    raise AssertionError(f"{sandbox_id} did not print its priority: {logs!r}")


def own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def own_group() -> str:
    """The controller's session group, or "" in the kernel's default group (a process
    started under init's session, as CI's is, reads an empty file)."""
    words = AUTOGROUP.read_text().split() if AUTOGROUP.exists() else ["-"]
    return words[0] if words else ""


def test_sandboxes_run_ten_steps_below_the_controller_by_default(
    backends: BackendFactory, make_spec: MakeSpec
) -> None:
    nice, group = probe(backends(), make_spec, "sbx-default")
    assert nice == min(own_nice() + 10, 19)
    if AUTOGROUP.exists():  # its session's group is lowered too, not only the process
        assert group.endswith(" nice 10"), group
        assert group.split()[0] != own_group()


def test_nice_0_runs_them_level_with_the_controller(
    backends: BackendFactory, make_spec: MakeSpec
) -> None:
    nice, group = probe(backends(nice=0), make_spec, "sbx-level")
    assert nice == own_nice()
    if AUTOGROUP.exists():
        assert group.endswith(" nice 0"), group


def test_sandboxes_of_their_own_users_are_lowered_too(
    backends: BackendFactory, make_spec: MakeSpec, sandbox_python: str
) -> None:
    """Under root the priority is set before the uid is dropped (a plain user may lower
    its own priority, but nothing else may raise it back)."""
    backend = backends(nice=7, user="auto", python=sandbox_python)
    nice, group = probe(backend, make_spec, "sbx-own-user")
    assert nice == min(own_nice() + 7, 19)
    if AUTOGROUP.exists():
        assert group.endswith(" nice 7"), group


def test_the_setting_is_a_nice_value_from_0_to_19() -> None:
    assert Settings().process_nice == 10
    for bad in (-1, 20):
        with pytest.raises(ValueError, match="process_nice"):
            Settings(process_nice=bad)
