"""Whom the process backend's sandboxes run as (SIMPLE_PROCESS_USER), on the backend itself.

The tests that start sandboxes as other users need root (CI runs as root) and use a
sandbox interpreter every user can run (tests/sandbox_python.py); the setting's parsing
and the messages do not.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.backends.base import Observed, ObservedState
from controller.backends.process import user as process_user
from controller.backends.process.backend import ProcessBackend
from controller.backends.process.user import SandboxUser, SandboxUsers, UserPolicy, blocked
from controller.errors import BackendError, ConfigError, NotFoundError
from tests.backends.conftest import MakeSpec
from tests.sandbox_python import require_root

WHOAMI = "import os; print('UID', os.getuid(), flush=True)"
SLEEPER = WHOAMI + "; import time; time.sleep(60)"
# A grandchild leaves the session (setsid), then grows past the 64 MiB limit.
HOG = """
import subprocess, sys, time
grow = ("b = bytearray()\\nwhile True:\\n"
        "    b.extend(b'x' * (16 << 20)); __import__('time').sleep(0.05)")
subprocess.Popen([sys.executable, "-c", grow], start_new_session=True)
time.sleep(60)
"""

BackendFactory = Callable[..., ProcessBackend]


@pytest.fixture
def backends(process_backends: Callable[..., ProcessBackend]) -> BackendFactory:
    """ProcessBackend(settings on tmp_path, SIMPLE_PROCESS_USER=user, ...)."""

    def make(user: str, python: str | None = None) -> ProcessBackend:
        return process_backends(process_user=user, process_python=python)

    return make


def exited(backend: ProcessBackend, sandbox_id: str, timeout_s: float = 30) -> Observed:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for seen in backend.observe():
            if seen.sandbox_id == sandbox_id and seen.state == ObservedState.EXITED:
                return seen
        time.sleep(0.05)
    raise AssertionError(f"{sandbox_id} did not end within {timeout_s} s")


def uid_of(backend: ProcessBackend, sandbox_id: str, timeout_s: float = 30) -> int:
    deadline, logs = time.monotonic() + timeout_s, b""
    while time.monotonic() < deadline:
        with contextlib.suppress(NotFoundError):  # the supervisor has not opened it yet
            logs = backend.read_logs(sandbox_id)
        found = re.search(rb"^UID (\d+)$", logs, re.M)
        if found:
            return int(found[1])
        time.sleep(0.05)
    raise AssertionError(f"{sandbox_id} did not say its uid: {logs!r}")


# -- the setting and the messages (any user) --------------------------------------------


def test_the_setting_names_auto_self_or_one_user() -> None:
    nobody = pwd.getpwnam("nobody")
    assert UserPolicy.parse("auto") == UserPolicy("auto")
    assert UserPolicy.parse("self") == UserPolicy("self")
    by_name = UserPolicy.parse("nobody")
    assert by_name == UserPolicy("fixed", SandboxUser(nobody.pw_uid, nobody.pw_gid))
    assert UserPolicy.parse(str(nobody.pw_uid)) == by_name
    assert UserPolicy.parse("61999") == UserPolicy("fixed", SandboxUser(61999, 61999))
    with pytest.raises(ConfigError, match="names no user") as error:
        UserPolicy.parse("no-such-user")
    assert error.value.hint and "auto, self" in error.value.hint


def test_sandboxes_run_as_the_controllers_user_with_self_or_when_not_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def users(mode: str) -> SandboxUsers:
        return SandboxUsers(UserPolicy.parse(mode), "python3", tmp_path, tmp_path, {})

    assert users("self").acquire() is None
    monkeypatch.setattr(process_user.os, "geteuid", lambda: 1000)
    assert users("auto").acquire() is None
    with pytest.raises(BackendError, match="runs as uid 1000 and cannot switch to uid 61999"):
        users("61999").acquire()


def test_the_message_names_the_directory_a_sandbox_user_cannot_pass(open_dir: Path) -> None:
    private = open_dir / "private"
    (private / "bin").mkdir(parents=True)
    program = private / "bin" / "python"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    private.chmod(0o700)
    user = SandboxUser(61999, 61999)
    assert blocked(str(program), user) == f"; {private} is mode 0700 (owner uid {os.getuid()})"
    private.chmod(0o711)
    assert blocked(str(program), user) == ""
    assert blocked(str(program), SandboxUser(os.getuid(), 61999)) == ""


@pytest.mark.parametrize("kind", ["symlink", "foreign"])
def test_a_working_root_someone_else_made_is_refused(
    backends: BackendFactory, make_spec: MakeSpec, open_dir: Path, kind: str
) -> None:
    """A name under /tmp can be taken before the controller creates it."""
    backend = backends("self")
    if kind == "symlink":
        backend.work_root.symlink_to(open_dir)
    else:
        require_root()
        backend.work_root.mkdir()
        os.chown(backend.work_root, 61999, 61999)
    try:
        with pytest.raises(BackendError, match="not a directory owned by this controller"):
            backend.launch(make_spec("sbx-taken", command=["python", "-c", "pass"]))
        assert not list(open_dir.iterdir())
    finally:
        if backend.work_root.is_symlink():
            backend.work_root.unlink()


# -- sandboxes as other users (root) -----------------------------------------------------


def test_a_restarted_controller_gives_no_sandbox_the_uid_of_a_live_one(
    backends: BackendFactory, make_spec: MakeSpec, sandbox_python: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = backends("auto", sandbox_python)
    first.launch(make_spec("sbx-live", command=["python", "-c", SLEEPER]))
    live = uid_of(first, "sbx-live")
    # The restarted controller has nothing in memory: only /proc tells it `live` is taken.
    restarted = backends("auto", sandbox_python)
    monkeypatch.setattr(process_user, "DYNAMIC_UIDS", range(live, live + 2))
    restarted.launch(make_spec("sbx-new", command=["python", "-c", WHOAMI]))
    assert uid_of(restarted, "sbx-new") == live + 1
    monkeypatch.setattr(process_user, "DYNAMIC_UIDS", range(live, live + 1))
    with pytest.raises(BackendError, match=f"no free uid left in {live}-{live}"):
        restarted.launch(make_spec("sbx-none", command=["python", "-c", WHOAMI]))


def test_the_memory_limit_counts_processes_that_left_the_session(
    backends: BackendFactory, make_spec: MakeSpec, sandbox_python: str
) -> None:
    """With a uid of its own, leaving the session does not leave the sandbox."""
    backend = backends("auto", sandbox_python)
    backend.launch(make_spec("sbx-hog", command=["python", "-c", HOG], memory="64Mi"))
    seen = exited(backend, "sbx-hog", timeout_s=30)
    assert seen.oom_killed, backend.read_logs("sbx-hog")


def test_an_explicit_user_runs_every_sandbox(
    backends: BackendFactory, make_spec: MakeSpec, sandbox_python: str
) -> None:
    backend = backends("nobody", sandbox_python)
    for sandbox_id in ("sbx-1", "sbx-2"):
        backend.launch(make_spec(sandbox_id, command=["python", "-c", WHOAMI]))
    nobody = pwd.getpwnam("nobody").pw_uid
    assert uid_of(backend, "sbx-1") == uid_of(backend, "sbx-2") == nobody


def test_an_explicit_user_whose_interpreter_lacks_the_runtime_fails_the_launch(
    backends: BackendFactory, make_spec: MakeSpec, sandbox_python: str
) -> None:
    bare = str(Path(sandbox_python).resolve())  # the system python3, without the venv
    backend = backends("nobody", bare)
    for _ in range(2):  # checked once, refused every time, fast
        started = time.monotonic()
        with pytest.raises(BackendError) as error:
            backend.launch(make_spec("sbx-bare", command=["python", "-c", WHOAMI]))
        assert time.monotonic() - started < 10
        message = str(error.value)
        assert message.startswith(f"SIMPLE_PROCESS_USER: uid {pwd.getpwnam('nobody').pw_uid}")
        assert f"cannot run sandboxes with {bare}" in message, message
        assert "No module named" in message, message
        assert error.value.hint and "SIMPLE_PROCESS_PYTHON" in error.value.hint
