"""Whom the process backend's sandboxes run as (`SIMPLE_PROCESS_USER`), and whether they can.

`auto` (the default) gives each sandbox a uid of its own when the controller runs as
root: one from systemd's range of dynamic users, which no account uses, held by no
running process and by no other live sandbox of this controller. Its gid is the same
number and it has no supplementary groups, so it can read only what every user may,
and signal only its own processes. Before the first such sandbox, one check starts the
sandbox interpreter as such a uid; if that fails (root's Python often lives under
/root, mode 0700), one warning says why and sandboxes run as the controller's user.
`self` always runs them as the controller's user; a user name or uid runs every
sandbox as that user, and a failing check is then a launch error.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import random
import shutil
import stat
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from controller.errors import BackendError, ConfigError

logger = logging.getLogger(__name__)

# systemd's DynamicUser= range: reserved for transient users, so no real account has one.
DYNAMIC_UIDS = range(61184, 65520)
PREFLIGHT_TIMEOUT_S = 30.0
# What a sandbox's interpreter must manage: the built-in runtime (httpx with it), and
# reaching its working directory by its absolute path.
PREFLIGHT_CODE = "import os, sandbox_image.runtime; os.listdir(os.getcwd())"
PRIVATE, TRAVERSABLE = 0o700, 0o711


@dataclass(frozen=True)
class SandboxUser:
    """The uid and gid a sandbox runs as. `unique`: allocated to this sandbox alone, so
    every process running as it belongs to the sandbox (the supervisor counts and kills
    by uid, which a process cannot leave as it can leave a session)."""

    uid: int
    gid: int
    unique: bool = False

    @property
    def argument(self) -> str:
        """How the supervisor's command line names it: `uid:gid[:unique]`."""
        return f"{self.uid}:{self.gid}" + (":unique" if self.unique else "")


@dataclass(frozen=True)
class UserPolicy:
    """`SIMPLE_PROCESS_USER`, parsed: `auto`, `self`, or one fixed user."""

    mode: Literal["auto", "self", "fixed"]
    fixed: SandboxUser | None = None

    @classmethod
    def parse(cls, value: str) -> UserPolicy:
        if value == "auto":
            return cls("auto")
        if value == "self":
            return cls("self")
        try:
            entry = pwd.getpwuid(int(value)) if value.isdigit() else pwd.getpwnam(value)
        except KeyError:
            if not value.isdigit():
                raise ConfigError(
                    f"SIMPLE_PROCESS_USER={value!r} names no user on this machine",
                    hint="use auto, self, a uid, or a user name from /etc/passwd",
                ) from None
            return cls("fixed", SandboxUser(int(value), int(value)))
        return cls("fixed", SandboxUser(entry.pw_uid, entry.pw_gid))


class SandboxUsers:
    """Hands each new sandbox the user it runs as (None: the controller's own)."""

    def __init__(
        self,
        policy: UserPolicy,
        python: str,
        work_root: Path,
        data_dir: Path,
        env: dict[str, str],
    ) -> None:
        self.policy = policy
        self.python = python
        self.work_root = work_root
        self.data_dir = data_dir
        self.env = env
        self._lock = threading.Lock()
        self._live: set[int] = set()
        self._failure: tuple[str, str] | None = None  # why sandboxes cannot drop, what to do
        self._checked = False
        self._accounts: set[int] = set()

    @property
    def drops(self) -> bool:
        """Whether sandboxes are meant to run as another user (before the check)."""
        if self.policy.mode == "fixed":
            return True
        return self.policy.mode == "auto" and os.geteuid() == 0

    def acquire(self) -> SandboxUser | None:
        """The user of a sandbox about to start; release it when the sandbox has ended.
        Raises BackendError when a fixed user cannot run sandboxes."""
        if not self.drops:
            return None
        with self._lock:
            if not self._checked:
                self._check()
            if self._failure is not None:
                if self.policy.mode == "fixed":
                    message, hint = self._failure
                    raise BackendError(f"SIMPLE_PROCESS_USER: {message}", hint=hint)
                return None
            if self.policy.fixed is not None:
                return self.policy.fixed
        held = ids_in_use()  # outside the lock: launches need not queue for each other's scan
        with self._lock:
            uid = self._free_uid(held)
            self._live.add(uid)
        return SandboxUser(uid, uid, unique=True)

    def release(self, user: SandboxUser | None) -> None:
        if user is not None and user.unique:
            with self._lock:
                self._live.discard(user.uid)

    def _check(self) -> None:
        """Once: can such a user run the sandbox interpreter? Then make the data
        directory private, or (auto) warn once and fall back to the controller's user.
        If the check itself raises, the next launch checks again."""
        self._failure = self._why_not()
        self._checked = True
        if self._failure is None:
            logger.info("process sandboxes run as unprivileged users (%s)", self.policy.mode)
        elif self.policy.mode == "auto":
            logger.warning(
                "process sandboxes run as the controller's user (root), not as unprivileged "
                "users: %s. %s, or set SIMPLE_PROCESS_USER=self to run them as root without "
                "this warning.",
                *self._failure,
            )

    def _why_not(self) -> tuple[str, str] | None:
        """Why sandboxes cannot run as the policy's users, and what to do; None if they can."""
        if self.policy.mode == "auto":
            self._accounts = {e.pw_uid for e in pwd.getpwall()} | {e.gr_gid for e in grp.getgrall()}
        user = self.policy.fixed
        if user is None:
            uid = self._free_uid(ids_in_use())
            user = SandboxUser(uid, uid)
        if os.geteuid() not in (0, user.uid):
            return (
                f"the controller runs as uid {os.geteuid()} and cannot switch to uid {user.uid}",
                "run the controller as root, or set SIMPLE_PROCESS_USER=self",
            )
        prepare_dir(self.work_root, TRAVERSABLE)
        reason = preflight(user, self.python, self.work_root, self.env)
        if reason is not None:
            return reason, _PYTHON_HINT
        _make_private(self.data_dir)  # its database, store and signing key
        return None

    def _free_uid(self, held: set[int]) -> int:
        """A uid of the dynamic range that no account, live sandbox or process (`held`)
        holds."""
        taken = self._live | self._accounts | held
        free = [uid for uid in DYNAMIC_UIDS if uid not in taken]
        if not free:
            raise BackendError(
                f"no free uid left in {DYNAMIC_UIDS.start}-{DYNAMIC_UIDS.stop - 1} for a sandbox",
                hint="wait for sandboxes to end, or lower the run's parallelism",
                transient=True,
            )
        return random.choice(free)


_PYTHON_HINT = (
    "Install Python where every user can read it (e.g. a virtualenv under /opt with this "
    "project installed) and point SIMPLE_PROCESS_PYTHON at its interpreter"
)


def ids_in_use(proc: str = "/proc") -> set[int]:
    """Every uid and gid a running process holds (real, effective, saved, filesystem)."""
    used: set[int] = set()
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:  # Uid: and Gid: are among the first lines; raw reads keep a scan cheap
            fd = os.open(f"{proc}/{name}/status", os.O_RDONLY)
            try:
                head = os.read(fd, 1024)
            finally:
                os.close(fd)
        except OSError:
            continue  # ended meanwhile
        for line in head.split(b"\n"):
            if line.startswith((b"Uid:", b"Gid:")):
                used.update(int(field) for field in line.split()[1:])
    return used


def _make_private(path: Path) -> None:
    try:
        if stat.S_IMODE(path.stat().st_mode) != PRIVATE:
            path.chmod(PRIVATE)
            logger.info("made %s private (mode 0700): sandboxes run as other users", path)
    except OSError as e:
        raise BackendError(f"cannot make the data directory {path} private: {e}") from e


def prepare_dir(path: Path, mode: int) -> None:
    """Create `path` with `mode`, or make sure the existing one is a real directory owned
    by this controller (a name under /tmp can be taken first by anyone), and set `mode`."""
    try:
        path.mkdir(mode=mode, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError as e:
        raise BackendError(f"cannot create the directory {path}: {e}") from e
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise BackendError(
            f"{path} is not a directory owned by this controller (uid {os.geteuid()})",
            hint="remove it (someone else may have created it) and start the sandbox again",
        )
    if stat.S_IMODE(info.st_mode) != mode:
        path.chmod(mode)


def preflight(user: SandboxUser, python: str, work_root: Path, env: dict[str, str]) -> str | None:
    """Why `user` cannot run sandboxes, or None: start `python` as that user in a working
    directory like a sandbox's, importing the runtime, with a timeout."""
    probe = work_root / f".preflight-{user.uid}"
    shutil.rmtree(probe, ignore_errors=True)
    probe.mkdir(mode=PRIVATE)
    os.chown(probe, user.uid, user.gid)
    who = f"uid {user.uid}"
    try:
        done = subprocess.run(
            [python, "-c", PREFLIGHT_CODE],
            cwd=probe,
            env={**env, "HOME": str(probe)},
            user=user.uid,
            group=user.gid,
            extra_groups=[],
            umask=0o077,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PREFLIGHT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        limit = f"{PREFLIGHT_TIMEOUT_S:.0f} s"
        return f"{who} did not import the sandbox runtime with {python} within {limit}"
    except OSError as e:
        why = f"{e.strerror}{blocked(python, user)}"
        return f"{who} cannot run the sandbox interpreter {python}: {why}"
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        why = (lines[-1] if lines else f"exit {done.returncode}") + blocked(python, user)
        return f"{who} cannot run sandboxes with {python}: {why}"
    return None


def blocked(program: str, user: SandboxUser) -> str:
    """`; /root is mode 0700 (owner uid 0)` for the first directory on the way to
    `program` (or the program itself) that `user` may not pass; empty if none."""
    path = shutil.which(program) or program
    literal, real = Path(os.path.abspath(path)), Path(os.path.realpath(path))
    steps = [*reversed(literal.parents), literal, *reversed(real.parents), real]
    for step in dict.fromkeys(steps):
        try:
            info = step.stat()
        except OSError:
            continue
        if not _may(info, user, 0o1 if stat.S_ISDIR(info.st_mode) else 0o5):
            mode = stat.S_IMODE(info.st_mode)
            return f"; {step} is mode {mode:04o} (owner uid {info.st_uid})"
    return ""


def _may(info: os.stat_result, user: SandboxUser, bits: int) -> bool:
    """Whether `user` (no supplementary groups) has `bits` (rwx as 4/2/1) on the file."""
    if info.st_uid == user.uid:
        shift = 6
    elif info.st_gid == user.gid:
        shift = 3
    else:
        shift = 0
    return (info.st_mode >> shift) & bits == bits
