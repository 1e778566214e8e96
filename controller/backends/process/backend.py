"""The `process` backend: one OS process per sandbox (the embedded default).

Each attempt gets its own directory `<data_dir>/sandboxes/<sandbox-id>/attempt-<n>/`
with `meta.json` (the labels), `output.log` (stdout and stderr), and `exit.json` once
it ends. Its working directory is outside the data directory (which holds the database,
the store and the signing key): `<tmp>/simple-work-<controller id>/<sandbox>/attempt-<n>/`.
A small supervisor (`process_supervisor.py`, forked by one long-lived fork server:
`process_forkserver.py`) owns the sandbox's process group, enforces the memory limit,
and records the exit, so a restarted controller finds every sandbox again; the files a
sandbox can write are never trusted to name a process to signal. Sandboxes run
`SIMPLE_PROCESS_NICE` steps below the controller's CPU priority, so busy ones cannot
starve the controller that supervises them.
When the controller runs as root, each sandbox runs as an unprivileged uid of its own
(`process_user.py`): its working directory is then the only one it owns, the data
directory is private, and the supervisor stays root.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from controller.backends import logbudget
from controller.backends.base import (
    LOG_CHUNK,
    Backend,
    LogView,
    Notify,
    Observed,
    ObservedState,
    SandboxSpec,
)
from controller.backends.process.forkserver import SUPERVISOR, ExitWatch, ForkServer
from controller.backends.process.user import (
    PRIVATE,
    TRAVERSABLE,
    SandboxUser,
    SandboxUsers,
    UserPolicy,
    prepare_dir,
)
from controller.backends.template_secrets import resolve
from controller.catalog.quantities import memory_bytes
from controller.errors import BackendError, NotFoundError
from controller.settings import Settings
from sandbox_image.contract import LABEL_CONTROLLER, LABEL_RUN_ID

logger = logging.getLogger(__name__)

STOP_GRACE_S = 3.0
LOG_BUDGET_STOPPED = (
    "stopped: its output passed SIMPLE_LOG_BUDGET and its template says on_log_budget: stop"
)
# What a sandbox process inherits from the controller: enough to run, no secrets.
INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")


class ProcessBackend(Backend):
    name = "process"
    supports_oom_detection = True

    def __init__(self, settings: Settings, notify: Notify | None = None) -> None:
        super().__init__(notify)
        self.root = (settings.data_dir / "sandboxes").resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        # Working directories live outside the data directory (its database, store, keys).
        self.work_root = Path(tempfile.gettempdir()) / f"simple-work-{settings.controller_id}"
        self.python = settings.process_python or sys.executable
        self.nice = settings.process_nice
        self.secrets_dir = settings.template_secrets_dir
        self.log_budget = settings.log_budget
        self.users = SandboxUsers(
            UserPolicy.parse(settings.process_user),
            self.python,
            self.work_root,
            settings.data_dir.resolve(),
            _inherited_env(),
        )
        # sandbox id -> (supervisor pid, attempt directory, user) while its supervisor runs
        self._children: dict[str, tuple[int, Path, SandboxUser | None]] = {}
        self._lock = threading.Lock()
        self._forks = ForkServer(sys.executable, _inherited_env())
        self._exits = ExitWatch(self._ended)

    def render(self, spec: SandboxSpec) -> dict[str, Any]:
        return {
            "kind": "process",
            "sandbox_id": spec.sandbox_id,
            "command": list(self._command(spec.command)),
            "working_dir": str(self._work(spec.sandbox_id, spec.env.attempt)),
            "env": spec.env.to_environ(),
            "secrets": [{"name": n, "key": k, "as": a} for n, k, a in spec.secrets],
            "labels": spec.labels,
            "limits": {
                "memory_bytes": memory_bytes(spec.resources.memory)
                if spec.resources.memory
                else None,
                "timeout_s": spec.timeout_s,
            },
        }

    def launch(self, spec: SandboxSpec) -> None:
        user = self.users.acquire()
        try:
            self._start(spec, user)
        except BaseException:
            self.users.release(user)
            raise

    def _start(self, spec: SandboxSpec, user: SandboxUser | None) -> None:
        directory = self._dir(spec.sandbox_id, spec.env.attempt)
        work = self._prepare_work(spec, user)
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        _write_json(directory / "meta.json", {"labels": spec.labels, "attempt": spec.env.attempt})
        env = _inherited_env()
        env.update(spec.env.to_environ())
        env.update(resolve(spec.secrets, self.secrets_dir))
        if user is not None:
            env["HOME"] = str(work)  # the only directory it may write besides /tmp
        limit = memory_bytes(spec.resources.memory) if spec.resources.memory else 0
        pid = self._forks.spawn(
            {
                "directory": str(directory),
                "memory_limit": limit,
                "workdir": str(work),
                "user": user.argument if user is not None else "-",
                "command": list(self._command(spec.command)),
                "env": env,
                "nice": self.nice,
                "log_budget": self.log_budget,
                "log_stop": spec.log_stop,
            }
        )
        _write_json(directory / "supervisor.json", {"pid": pid})
        with self._lock:
            self._children[spec.sandbox_id] = (pid, directory, user)
        self._exits.add(pid, spec.sandbox_id)
        logger.info(
            "launched sandbox %s attempt %d (supervisor pid %d%s)",
            spec.sandbox_id,
            spec.env.attempt,
            pid,
            f", uid {user.uid}" if user is not None else "",
        )

    def _prepare_work(self, spec: SandboxSpec, user: SandboxUser | None) -> Path:
        """A fresh working directory, the sandbox's own: with another user, owned by it
        (0700) under root's directories that others may pass but not list (0711)."""
        work = self._work(spec.sandbox_id, spec.env.attempt)
        parents = TRAVERSABLE if user is not None else PRIVATE
        prepare_dir(self.work_root, parents)
        prepare_dir(work.parent, parents)
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(mode=PRIVATE)
        if user is not None:
            os.chown(work, user.uid, user.gid)
        return work

    def _ended(self, pid: int, sandbox_id: str) -> None:
        """Its supervisor exited (the exit watch): report the exit it recorded."""
        with self._lock:
            child = self._children.get(sandbox_id)
            if child is None or child[0] != pid:  # not the attempt this controller runs now
                return
            del self._children[sandbox_id]
        _, directory, user = child
        self.users.release(user)  # the supervisor killed every process running as it
        observed = self._observe_dir(directory)  # the supervisor wrote exit.json before exiting
        if observed is not None and observed.state == ObservedState.EXITED:
            self._exit_seen(observed)
        else:
            self._notify()

    def start(self) -> None:
        """Start the fork server now rather than on the first launch's path."""
        try:
            self._forks.start()
        except BackendError as e:  # the first launch tries again, and fails with the reason
            logger.warning("%s", e)

    def close(self) -> None:
        """Stop the fork server and the watch; running sandboxes carry on, supervised. The
        working root goes too once no sandbox works in it (each controller has its own,
        so a host that runs many, tests and benches among them, would collect them)."""
        self._forks.close()
        self._exits.close()
        with contextlib.suppress(OSError):  # not empty: a sandbox still runs, adoptable
            self.work_root.rmdir()

    def observe(self) -> list[Observed]:
        seen = []
        for directory in _attempt_dirs(self.root):
            observed = self._observe_dir(directory)
            if observed is not None:
                seen.append(observed)
        return seen

    def _observe_dir(self, directory: Path) -> Observed | None:
        """What one attempt directory shows. The sandbox can write these files, so the
        sandbox and attempt come from the path, and only a dead supervisor means exited."""
        meta = _read_json(directory / "meta.json")
        if not isinstance(meta, dict) or not isinstance(meta.get("labels"), dict):
            return None
        labels = meta["labels"]
        try:
            attempt = int(directory.name.removeprefix("attempt-"))
        except ValueError:
            return None
        base = {
            "sandbox_id": directory.parent.name,
            "run_id": str(labels.get(LABEL_RUN_ID, "")),
            "attempt": attempt,
            "controller_id": labels.get(LABEL_CONTROLLER),
        }
        if self._supervisor(directory.parent.name, directory) is not None:
            return Observed(**base, state=ObservedState.RUNNING)
        exit_info = _read_json(directory / "exit.json")
        if isinstance(exit_info, dict) and isinstance(exit_info.get("exit_code"), int):
            return Observed(
                **base,
                state=ObservedState.EXITED,
                exit_code=exit_info["exit_code"],
                oom_killed=bool(exit_info.get("oom_killed")),
                exited_at=exit_info.get("finished_at"),
                reason=LOG_BUDGET_STOPPED if exit_info.get("log_budget_stopped") else None,
            )
        return None  # the supervisor died without recording an exit: the sandbox is lost

    def stop(self, sandbox_id: str) -> None:
        """Signal the sandbox's process group, found from its supervisor, never from a file
        the sandbox can write (its `child.json` could name any group)."""
        for directory in self.root.glob(f"{sandbox_id}/attempt-*"):
            supervisor = self._supervisor(sandbox_id, directory)
            group = sandbox_group(supervisor) if supervisor else None
            if group is None:
                continue
            _signal_group(group, signal.SIGTERM)
            timer = threading.Timer(STOP_GRACE_S, _signal_group, (group, signal.SIGKILL))
            timer.daemon = True
            timer.start()
            logger.info("stopping sandbox %s (process group %d)", sandbox_id, group)

    def _supervisor(self, sandbox_id: str, directory: Path) -> int | None:
        """The pid of the attempt's live supervisor: the one this controller started (in
        memory), or, after a restart, the one `supervisor.json` names if its command line
        proves it is this attempt's supervisor."""
        with self._lock:
            child = self._children.get(sandbox_id)
        if child is not None and child[1] == directory:
            return child[0]
        recorded = _read_json(directory / "supervisor.json")
        pid = recorded.get("pid") if isinstance(recorded, dict) else None
        if isinstance(pid, int) and _alive(pid, str(directory)):
            return pid
        return None

    def _latest(self, sandbox_id: str) -> str:
        """The directory of the sandbox's latest attempt with output."""
        dirs = sorted(
            (p.parent for p in self.root.glob(f"{sandbox_id}/attempt-*/{logbudget.HEAD}")),
            key=lambda p: int(p.name.split("-")[1]),
        )
        if not dirs:
            raise NotFoundError(f"no live logs for sandbox {sandbox_id}")
        return str(dirs[-1])

    def read_logs(self, sandbox_id: str) -> bytes:
        return logbudget.read_all(self._latest(sandbox_id))

    def open_logs(self, sandbox_id: str) -> LogView:
        chunks, dropped = logbudget.open_kept(self._latest(sandbox_id))
        return LogView(chunks, dropped)

    def read_logs_from(
        self, sandbox_id: str, offset: int, limit: int = LOG_CHUNK
    ) -> tuple[bytes, int]:
        return logbudget.read_from(self._latest(sandbox_id), offset, limit)

    def remove(self, sandbox_id: str) -> None:
        shutil.rmtree(self.root / sandbox_id, ignore_errors=True)
        shutil.rmtree(self.work_root / sandbox_id, ignore_errors=True)

    def _command(self, command: tuple[str, ...]) -> tuple[str, ...]:
        """`python` in a template means the sandbox interpreter (SIMPLE_PROCESS_PYTHON,
        default the controller's own: it has the runtime)."""
        if command and command[0] in ("python", "python3"):
            return (self.python, *command[1:])
        return command

    def _dir(self, sandbox_id: str, attempt: int) -> Path:
        return self.root / sandbox_id / f"attempt-{attempt}"

    def _work(self, sandbox_id: str, attempt: int) -> Path:
        return self.work_root / sandbox_id / f"attempt-{attempt}"


def _attempt_dirs(root: Path) -> list[Path]:
    """Every `<sandbox>/attempt-<n>/` under root; one removed meanwhile is skipped."""
    found = []
    for sandbox in _entries(root):
        found += [a for a in _entries(sandbox) if a.name.startswith("attempt-")]
    return found


def _entries(directory: Path) -> list[Path]:
    try:
        with os.scandir(directory) as entries:
            return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):  # removed by a clean-up meanwhile
        return []


def _inherited_env() -> dict[str, str]:
    return {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}


def _alive(pid: int, directory: str) -> bool:
    """True if `pid` runs and is the supervisor of the attempt in `directory`: its command
    line is the fork server's and its working directory that attempt's (guards against
    pid reuse and against a sandbox pointing `supervisor.json` at another process)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return len(argv) > 3 and argv[3] == str(SUPERVISOR).encode() and cwd == directory


def sandbox_group(supervisor: int) -> int | None:
    """The process group of the supervisor's child (the sandbox), if it leads one."""
    try:
        with open(f"/proc/{supervisor}/task/{supervisor}/children") as handle:
            children = [int(pid) for pid in handle.read().split()]
    except (OSError, ValueError):
        return None
    for pid in children:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == supervisor and int(fields[2]) == pid:  # ppid, pgrp
            return pid
    return None


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
