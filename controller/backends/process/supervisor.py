"""Supervisors of process-backend sandboxes, forked by one long-lived fork server.

    python -I -S process_supervisor.py --serve

The fork server reads requests from stdin, one JSON object per line:
`{"directory", "memory_limit", "workdir", "user", "command", "env", "log_budget",
"log_stop"}`, and answers each
with one line on stdout, the pid of the supervisor it forked (or `error <reason>`).
Forking a small running interpreter costs about a millisecond; starting one per
sandbox cost 10-20 ms of CPU, more on busy cores, on every launch's path.

A supervisor starts COMMAND (with exactly the environment ENV) in its own session and
process group with WORKDIR as working directory and its output (stdout and stderr, one
pipe) written under the log budget LOG_BUDGET: the head in DIRECTORY/output.log, the
tail in rotating segments beside it (`logbudget.py`), the middle counted, never stored;
with LOG_STOP it kills the sandbox once its output passes the budget instead. It kills
it (SIGKILL) if the resident memory of its whole session (every process it started that
did not leave it with setsid) passes MEMORY_LIMIT bytes (0 = no limit),
and writes DIRECTORY/exit.json when it ends. Its own working directory is DIRECTORY,
which, with its command line, is how a controller recognises it (`/proc/<pid>/cwd`).
USER is `-` (run COMMAND as the supervisor's own user) or `uid:gid[:unique]`: COMMAND
then runs as that user, with no supplementary groups, umask 077 and no way to gain
privileges (setuid programs do not raise them); `unique` says the uid is this
sandbox's alone, so every process running as it is the sandbox's: counted for memory
and killed at the end even if it left the session. The supervisor itself keeps its
user (root), the log file, the accounting and the kill. Supervisors and the fork
server each live in a session of their own: a supervisor outlives its fork server and
a controller that is killed, and a new controller reads the exit it recorded. The fork
server ends when its stdin closes (its controller went away).
"""

import os
import select
import signal
import sys
import time
from typing import Any

POLL_S = 0.05
DEFAULT_LOG_BUDGET = 16 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
PR_SET_NO_NEW_PRIVS = 38  # <linux/prctl.h>


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def session_members(sid: int) -> list[tuple[int, int]]:
    """(pid, resident bytes) of every process in session `sid`, from /proc/*/stat."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # field 6, the session (fields[0] is field 3)
                members.append((int(name), int(fields[21]) * PAGE))  # field 24, rss pages
        except (OSError, ValueError, IndexError):
            continue
    return members


def uid_members(uid: int) -> list[tuple[int, int]]:
    """(pid, resident bytes) of every process whose real uid is `uid`, from /proc/*/status."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as handle:
                for line in handle:  # Uid: comes before VmRSS: (absent for zombies)
                    if line.startswith("Uid:") and int(line.split()[1]) != uid:
                        break
                    if line.startswith("VmRSS:"):
                        members.append((int(name), int(line.split()[1]) * 1024))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return members


def kill_session(sid: int, user: tuple[int, int, bool] | None) -> None:
    """SIGKILL the group and every other process left in the session; with a uid of the
    sandbox's own, every process running as it too."""
    try:  # noqa: SIM105 - contextlib would add to every sandbox's start-up
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid, _ in session_members(sid):
        try:  # noqa: SIM105
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if user is not None and user[2]:
        kill_uid(user[0], user[1])


def kill_uid(uid: int, gid: int) -> None:
    """SIGKILL every process running as `uid`: kill(-1) from a child that becomes that
    uid reaches exactly those, in one pass that a forking process cannot outrun."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)  # every process it may signal but itself
        except OSError:
            os._exit(1)
        os._exit(0)
    os.waitpid(pid, 0)


def parse_user(argument: str) -> tuple[int, int, bool] | None:
    """`-` or `uid:gid[:unique]`, as (uid, gid, unique)."""
    if argument == "-":
        return None
    parts = argument.split(":")
    return int(parts[0]), int(parts[1]), parts[2:] == ["unique"]


def drop_privileges(uid: int, gid: int) -> None:
    """In the sandbox's child: become uid:gid for good, with no supplementary groups, a
    private umask, and no way back up through setuid programs."""
    import ctypes  # only here, after the fork: plain sandboxes never pay for it

    os.umask(0o077)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def write_record(path: str, fields: dict[str, object]) -> None:
    """A flat JSON object of numbers, booleans and nulls, written atomically."""
    def encode(value: object) -> str:
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "true" if value else "false"
        return repr(value)

    body = ", ".join(f'"{key}": {encode(value)}' for key, value in fields.items())
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write("{" + body + "}")
    os.replace(tmp, path)


def spawn(
    workdir: str,
    command: list[str],
    env: dict[str, str],
    log_fd: int,
    user: tuple[int, int, bool] | None,
    nice: int = 0,
) -> int:
    """Fork and exec COMMAND as the leader of a new session (as `user` if given, `nice`
    below the controller's CPU priority); 127 if it cannot start."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.setsid()
            lower_priority(nice)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)  # from here on, a failure to start is in the sandbox's log
            os.chdir(workdir)
            if user is not None:
                drop_privileges(user[0], user[1])
            os.execvpe(command[0], command, env)
        except OSError as e:
            os.write(2, f"simple: cannot start {command!r}: {e}\n".encode())
        os._exit(127)
    return pid


def lower_priority(nice: int) -> None:
    """In the sandbox's child, a new session's leader: run `nice` steps below the
    controller. With the kernel's autogroups, every session is scheduled as a group of
    its own and a process's nice value only weighs inside its group, so the group's is
    set too: else each busy sandbox would get as much CPU as the whole controller."""
    if nice <= 0:
        return
    os.nice(nice)
    try:
        with open("/proc/self/autogroup", "w") as handle:
            handle.write(str(nice))
    except OSError:
        pass  # a kernel without autogroups: the process's own nice value is what counts


def exit_poller(pid: int) -> "select.poll | None":
    """A poller that wakes the moment `pid` exits (a pidfd, Linux 5.3+), or None."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return poller


def supervise(
    directory: str,
    memory_limit: int,
    workdir: str,
    user: tuple[int, int, bool] | None,
    command: list[str],
    env: dict[str, str],
    log: Any,
    nice: int = 0,
    log_stop: bool = False,
) -> None:
    read_fd, write_fd = logbudget.output_pipe()
    pid = spawn(workdir, command, env, write_fd, user, nice)
    os.close(write_fd)  # the sandbox holds the only write ends: EOF once they are gone
    unique_uid = user[0] if user is not None and user[2] else None
    write_record(os.path.join(directory, "child.json"), {"pid": pid, "pgid": pid})
    exits = exit_poller(pid)
    watching_exit = exits is not None
    poller = exits or select.poll()
    poller.register(read_fd, select.POLLIN)
    piped = True
    oom = over_budget = False
    checks = 0
    next_check = time.monotonic()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        now = time.monotonic()
        # The direct child every check; all of the sandbox (a /proc scan) every fourth.
        if memory_limit and now >= next_check:
            checks += 1
            next_check = now + POLL_S
            if rss_bytes(pid) > memory_limit or (
                checks % 4 == 0 and sandbox_rss(pid, unique_uid) > memory_limit
            ):
                oom = True
        if log_stop and log.written > log.head_limit + 2 * log.segment:
            over_budget = True
        if oom or over_budget:
            kill_session(pid, user)
            _, status = os.waitpid(pid, 0)
            break
        # Woken by output, or as soon as the child exits: its end is on the critical path.
        wait_ms = POLL_S * 1000 if (memory_limit or not watching_exit) else None
        for fd, _ in poller.poll(wait_ms):
            if fd == read_fd and piped and not logbudget.pump(read_fd, log):
                piped = False
                poller.unregister(read_fd)
    code = os.waitstatus_to_exitcode(status)
    # The session may hold grandchildren; the sandbox ends with all of them.
    kill_session(pid, user)
    if piped:
        logbudget.drain(read_fd, log)
    os.close(read_fd)
    if user is not None:  # what it left behind is no longer reachable by its uid
        try:
            os.chown(workdir, os.getuid(), os.getgid())
            os.chmod(workdir, 0o700)
        except OSError:
            pass  # already removed
    if oom:
        log.write(b"simple: killed: resident memory passed the sandbox's memory limit\n")
    if over_budget:
        log.write(b"simple: stopped: its output passed the sandbox's log budget\n")
    log.close()
    write_record(
        os.path.join(directory, "exit.json"),
        {
            "exit_code": 128 - code if code < 0 else code,
            "signal": -code if code < 0 else None,
            "oom_killed": oom,
            "log_budget_stopped": over_budget,
            "finished_at": time.time(),
        },
    )


def sandbox_rss(sid: int, unique_uid: int | None) -> int:
    """Resident bytes of the whole sandbox: its session, or every process of its own uid."""
    members = session_members(sid) if unique_uid is None else uid_members(unique_uid)
    return sum(rss for _, rss in members)


def supervisor(request: dict) -> None:
    """In the forked child: become the sandbox's supervisor, then exit."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the fork server's; it needs its exits
    os.setsid()
    directory = request["directory"]  # born in it (see serve): what names this supervisor
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    log = logbudget.BudgetWriter(directory, int(request.get("log_budget") or DEFAULT_LOG_BUDGET))
    supervise(
        directory,
        int(request["memory_limit"]),
        request["workdir"],
        parse_user(request["user"]),
        [str(arg) for arg in request["command"]],
        {str(k): str(v) for k, v in request["env"].items()},
        log,
        int(request.get("nice", 0)),
        bool(request.get("log_stop")),
    )


def load_logbudget() -> Any:
    """The controller's `backends/logbudget.py`, loaded by path: this script runs isolated
    (`-I -S`), outside the package."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "logbudget.py")
    spec = importlib.util.spec_from_file_location("simple_logbudget", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


logbudget: Any = None  # the fork server loads it (serve) before any supervisor is forked


def serve() -> None:
    """Fork a supervisor per request line on stdin until it closes; answer with its pid."""
    import json  # once, for the server's life: every supervisor is forked with it loaded

    global logbudget
    logbudget = load_logbudget()

    # Supervisors are reaped by the kernel; the controller watches each one by its pidfd.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            # The child is born in its attempt's directory: with the command line, what
            # names it as that attempt's supervisor, from its first instant.
            os.chdir(request["directory"])
            pid = os.fork()
        except (ValueError, OSError, KeyError, TypeError) as e:
            answer = f"error {type(e).__name__}: {e}".replace("\n", " ")
        else:
            if pid == 0:
                try:
                    supervisor(request)
                except BaseException:  # a child never returns into the loop
                    os._exit(1)
                os._exit(0)
            answer = str(pid)
        os.chdir("/")
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if sys.argv[1:] != ["--serve"]:
        sys.exit("usage: process_supervisor.py --serve (started by the process backend)")
    serve()
