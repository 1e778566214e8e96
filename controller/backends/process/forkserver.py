"""The process backend's fork server and the watch on the supervisors it forks.

Starting a Python interpreter for each sandbox's supervisor cost 10-20 ms of CPU (more
on busy cores) on every launch's path. Instead one small interpreter is started once
(`process_supervisor.py --serve`, its own session, nothing imported but the standard
library) and forks a supervisor per launch in about a millisecond. Supervisors are not
the controller's children, so their ends are watched by pidfd: one thread for all of
them, woken the moment one exits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.errors import BackendError

logger = logging.getLogger(__name__)

SUPERVISOR = Path(__file__).with_name("supervisor.py")
ANSWER_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 5.0
# Without pidfds (Linux < 5.3) the watch looks at each supervisor this often instead.
SWEEP_S = 0.1


class ForkServer:
    """Forks a supervisor per request; started on first use and again if it died."""

    def __init__(self, python: str, env: dict[str, str]) -> None:
        self._python, self._env = python, env
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def spawn(self, request: dict[str, Any]) -> int:
        """The pid of a new supervisor for `request` (see process_supervisor.py)."""
        line = json.dumps(request).encode() + b"\n"
        with self._lock:
            process = self._running()
            try:
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write(line)
                process.stdin.flush()
                answer = _read_line(process.stdout.fileno(), ANSWER_TIMEOUT_S)
            except (OSError, TimeoutError) as e:
                process.kill()  # hung or gone: a new one serves the next launch
                self._discard(process)
                raise BackendError(f"the process backend's fork server failed: {e}") from e
        if not answer.isdigit():
            raise BackendError(f"the process backend's fork server refused a launch: {answer}")
        return int(answer)

    def start(self) -> None:
        """Start it now (it starts on first use otherwise)."""
        with self._lock:
            self._running()

    def close(self) -> None:
        with self._lock:
            if self._process is not None:
                self._discard(self._process)

    def _running(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        try:
            self._process = subprocess.Popen(
                [self._python, "-I", "-S", str(SUPERVISOR), "--serve"],
                env=self._env,
                cwd="/",  # never an attempt's directory: it cannot pass for a supervisor
                start_new_session=True,  # signals to the controller's group are not its own
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError as e:
            raise BackendError(f"cannot start the process backend's fork server: {e}") from e
        logger.debug("fork server started (pid %d)", self._process.pid)
        return self._process

    def _discard(self, process: subprocess.Popen[bytes]) -> None:
        """Close its stdin (it exits at once; the supervisors it forked carry on)."""
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            process.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=CLOSE_TIMEOUT_S)
        if process.stdout is not None:
            process.stdout.close()
        if self._process is process:
            self._process = None


def _read_line(fd: int, timeout_s: float) -> str:
    """The answer to the one request in flight: a line from the pipe, within the timeout.
    Nothing can follow it (the server answers only what it was asked), so it is read in
    as few calls as the pipe allows, not byte by byte."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError(f"no answer within {timeout_s:.0f} s")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise OSError("it exited")
        data += chunk
    if data.count(b"\n") > 1:
        raise OSError(f"it answered more than it was asked: {data[:200]!r}")
    return data.decode(errors="replace").strip()


class ExitWatch:
    """Calls `ended(pid, key)` once for each watched pid, as soon as that process exits."""

    def __init__(self, ended: Callable[[int, str], None]) -> None:
        self._ended = ended
        self._lock = threading.Lock()
        self._pidfds: dict[int, tuple[int, str]] = {}  # pidfd -> (pid, key)
        self._swept: dict[int, str] = {}  # pid -> key, where no pidfd could be opened
        self._poller = select.poll()
        self._wake_r, self._wake_w = os.pipe()
        self._poller.register(self._wake_r, select.POLLIN)
        self._closed = False
        self._thread: threading.Thread | None = None  # started by the first `add`

    def add(self, pid: int, key: str) -> None:
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        with self._lock:
            if self._closed:
                if pidfd is not None:
                    os.close(pidfd)
                return
            if pidfd is None:
                self._swept[pid] = key
            else:
                self._pidfds[pidfd] = (pid, key)
                self._poller.register(pidfd, select.POLLIN)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, daemon=True, name="process-exits"
                )
                self._thread.start()
        os.write(self._wake_w, b".")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        os.write(self._wake_w, b".")
        if thread is not None:
            thread.join(timeout=CLOSE_TIMEOUT_S)
        with self._lock:
            for pidfd in self._pidfds:
                os.close(pidfd)
            self._pidfds.clear()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    break
                timeout = SWEEP_S * 1000 if self._swept else None
            ready = [fd for fd, _ in self._poller.poll(timeout)]
            if self._wake_r in ready:
                os.read(self._wake_r, 4096)
            ended = self._take(fd for fd in ready if fd != self._wake_r)
            for pid, key in ended:
                try:
                    self._ended(pid, key)
                except Exception:  # the watch must outlive any one sandbox's handling
                    logger.exception("handling the end of %s failed", key)

    def _take(self, ready: Any) -> list[tuple[int, str]]:
        ended = []
        with self._lock:
            for pidfd in ready:
                watched = self._pidfds.pop(pidfd, None)
                if watched is not None:
                    self._poller.unregister(pidfd)
                    os.close(pidfd)
                    ended.append(watched)
            for pid, key in list(self._swept.items()):
                if not _exists(pid):
                    del self._swept[pid]
                    ended.append((pid, key))
        return ended


def _exists(pid: int) -> bool:
    """True while `pid` has not exited (a zombie has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False

