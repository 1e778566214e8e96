"""The process backend's fork server: supervisors forked, not started, and watched by pidfd."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from controller.backends.base import Observed, ObservedState
from controller.backends.process import forkserver as process_forkserver
from controller.backends.process.backend import ProcessBackend, _alive, sandbox_group
from controller.backends.process.forkserver import ExitWatch, ForkServer
from controller.errors import BackendError
from tests.backends.conftest import MakeSpec

SLEEPER = "import time; time.sleep(60)"


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])


def wait_for(check: Callable[[], object], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.02)


@pytest.fixture
def make_backend(
    process_backends: Callable[..., ProcessBackend],
) -> Callable[..., ProcessBackend]:
    """ProcessBackend on tmp_path (sandboxes as the controller's user), reporting its exits
    to `exits` if given; cleaned up by `process_backends`."""

    def make(exits: list[Observed] | None = None) -> ProcessBackend:
        backend = process_backends()
        if exits is not None:
            backend.listen_for_exits(exits.append)
        return backend

    return make


def supervisor_of(backend: ProcessBackend, sandbox_id: str) -> int:
    """The attempt's supervisor, once it has started the sandbox."""
    directory = backend.root / sandbox_id / "attempt-1"
    record = directory / "supervisor.json"
    wait_for(record.exists, "supervisor.json")
    pid = int(json.loads(record.read_text())["pid"])
    assert os.readlink(f"/proc/{pid}/cwd") == str(directory)  # born in it
    wait_for(lambda: sandbox_group(pid) is not None, "the sandbox's process group")
    return pid


def test_one_fork_server_forks_every_supervisor_and_the_watch_reports_each_exit(
    make_backend: Callable[..., ProcessBackend], make_spec: MakeSpec
) -> None:
    exits: list[Observed] = []
    backend = make_backend(exits)
    backend.start()  # as the controller starts: the server is up before the first launch
    assert backend._forks._process is not None
    started = backend._forks._process.pid
    for n in range(3):
        backend.launch(make_spec(f"sbx-{n}", command=["python", "-c", f"exit({n})"]))
    wait_for(lambda: len(exits) == 3, "three exits reported")
    assert sorted((e.sandbox_id, e.exit_code) for e in exits) == [
        ("sbx-0", 0), ("sbx-1", 1), ("sbx-2", 2)]
    # One interpreter started for all three: each supervisor is a child of the same server.
    backend.launch(make_spec("sbx-live", command=["python", "-c", SLEEPER]))
    supervisor = supervisor_of(backend, "sbx-live")
    server = parent_of(supervisor)
    assert server == started == backend._forks._process.pid
    assert os.readlink(f"/proc/{supervisor}/cwd") == str(backend.root / "sbx-live" / "attempt-1")
    assert os.getsid(supervisor) == supervisor and os.getsid(server) == server


def test_a_dead_fork_server_is_replaced_and_its_supervisors_carry_on(
    make_backend: Callable[..., ProcessBackend], make_spec: MakeSpec
) -> None:
    exits: list[Observed] = []
    backend = make_backend(exits)
    backend.launch(make_spec("sbx-before", command=["python", "-c", "import time; time.sleep(1)"]))
    first = backend._forks._process
    assert first is not None
    first.kill()
    first.wait(timeout=10)
    backend.launch(make_spec("sbx-after", command=["python", "-c", "pass"]))
    second = backend._forks._process
    assert second is not None and second.pid != first.pid
    wait_for(lambda: len(exits) == 2, "both exits reported")
    assert {(e.sandbox_id, e.exit_code) for e in exits} == {("sbx-before", 0), ("sbx-after", 0)}


def test_a_restarted_controller_knows_a_supervisor_by_its_command_line_and_directory(
    make_backend: Callable[..., ProcessBackend], make_spec: MakeSpec
) -> None:
    first = make_backend()
    first.launch(make_spec("sbx-live", command=["python", "-c", SLEEPER]))
    supervisor = supervisor_of(first, "sbx-live")
    first.close()  # the fork server goes; the supervisor stays
    restarted = make_backend()
    directory = restarted.root / "sbx-live" / "attempt-1"
    assert [(s.sandbox_id, s.state) for s in restarted.observe()] == [
        ("sbx-live", ObservedState.RUNNING)]
    assert _alive(supervisor, str(directory))
    # supervisor.json pointing at any other process does not pass for the supervisor:
    # the fork server (its command line, but not this directory), the test itself.
    restarted.launch(make_spec("sbx-other", command=["python", "-c", SLEEPER]))
    assert restarted._forks._process is not None
    for impostor in (restarted._forks._process.pid, os.getpid()):
        assert not _alive(impostor, str(directory))
    restarted.stop("sbx-live")
    wait_for(lambda: not _alive(supervisor, str(directory)), "the stopped supervisor's end")
    assert (directory / "exit.json").exists()


def test_a_fork_server_that_does_not_answer_fails_the_launch_within_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    silent = tmp_path / "silent-python"
    silent.write_text("#!/bin/sh\nexec sleep 60\n")
    silent.chmod(0o755)
    monkeypatch.setattr(process_forkserver, "ANSWER_TIMEOUT_S", 0.5)
    server = ForkServer(str(silent), {"PATH": os.environ["PATH"]})
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"fork server failed: no answer within 0 s"):
        server.spawn({"directory": str(tmp_path)})
    assert time.monotonic() - started < 5
    assert server._process is None  # discarded: the next launch starts a new one
    server.close()


def test_a_fork_server_that_answers_more_than_it_was_asked_is_replaced(tmp_path: Path) -> None:
    chatty = tmp_path / "chatty-python"
    chatty.write_text("#!/bin/sh\nread request\nprintf '101\\n102\\n'\nexec sleep 60\n")
    chatty.chmod(0o755)
    server = ForkServer(str(chatty), {"PATH": os.environ["PATH"]})
    with pytest.raises(BackendError, match=r"answered more than it was asked: b'101\\n102\\n'"):
        server.spawn({"directory": str(tmp_path)})
    assert server._process is None
    server.close()


def test_a_request_the_fork_server_cannot_serve_is_refused_and_it_serves_the_next(
    tmp_path: Path,
) -> None:
    server = ForkServer(sys.executable, {"PATH": os.environ["PATH"]})
    try:
        server.start()
        assert server._process is not None
        pid = server._process.pid
        missing = tmp_path / "no-such-attempt"
        refused = f"refused a launch: error FileNotFoundError.*{missing}"
        with pytest.raises(BackendError, match=refused):
            server.spawn({"directory": str(missing)})
        with pytest.raises(BackendError, match="refused a launch: error TypeError: chdir"):
            server.spawn({"directory": 3.5})
        with pytest.raises(BackendError, match="refused a launch: error KeyError"):
            server.spawn({"workdir": str(tmp_path)})
        assert server._process is not None and server._process.pid == pid  # still serving
    finally:
        server.close()


@pytest.mark.parametrize("pidfds", [True, False], ids=["pidfd", "no-pidfd"])
def test_the_exit_watch_wakes_for_each_pid_once(
    pidfds: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a pidfd per process (Linux 5.3+), or without one, looking every 100 ms."""
    if not pidfds:
        def unsupported(pid: int) -> int:
            raise OSError(38, "Function not implemented")

        monkeypatch.setattr(process_forkserver.os, "pidfd_open", unsupported)
    ended: list[str] = []
    done = threading.Event()

    def end(pid: int, key: str) -> None:
        ended.append(f"{key} {pid}")
        done.set()

    watch = ExitWatch(end)
    pid = os.fork()
    if pid == 0:
        time.sleep(0.3)
        os._exit(0)
    try:
        watch.add(pid, "child")
        assert done.wait(10), "the exit was not reported"
        os.waitpid(pid, 0)
        time.sleep(0.2)
        assert ended == [f"child {pid}"]
    finally:
        watch.close()
        if not done.is_set():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_closing_removes_the_working_root_unless_a_sandbox_still_works_in_it(
    make_backend: Callable[..., ProcessBackend], make_spec: MakeSpec
) -> None:
    exits: list[Observed] = []
    backend = make_backend(exits)
    backend.launch(make_spec("sbx-done", command=["python", "-c", "pass"]))
    wait_for(lambda: exits, "its exit")
    backend.remove("sbx-done")
    assert backend.work_root.is_dir()
    backend.close()
    assert not backend.work_root.exists()  # one per controller: none left behind

    again = make_backend()
    again.launch(make_spec("sbx-live", command=["python", "-c", SLEEPER]))
    supervisor_of(again, "sbx-live")
    again.close()  # it carries on, supervised, and a restarted controller adopts it
    assert (again.work_root / "sbx-live" / "attempt-1").is_dir()
