"""Supervisor of one process-backend sandbox; run as a script, standard library only.

    python -I -S process_supervisor.py DIR MEMORY_BYTES WORKDIR -- COMMAND...

It starts COMMAND in its own session and process group with WORKDIR as working
directory and output to DIR/output.log, kills it (SIGKILL) if the resident memory of
its whole session (every process it started that did not leave it with setsid) passes
MEMORY_BYTES (0 = no limit), and writes DIR/exit.json when it ends. It
lives in its own session, so it outlives a controller that is killed and lets a
new controller read the exit it recorded. It imports nothing heavier than `os`
(no subprocess, no json): its start-up is on every sandbox's launch path.
"""

import os
import signal
import sys
import time

POLL_S = 0.05
PAGE = os.sysconf("SC_PAGE_SIZE")


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


def kill_session(sid: int) -> None:
    """SIGKILL the group and every other process left in the session."""
    try:  # noqa: SIM105 - contextlib would add to every sandbox's start-up
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid, _ in session_members(sid):
        try:  # noqa: SIM105
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


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


def spawn(workdir: str, command: list[str], log_fd: int) -> int:
    """Fork and exec COMMAND as the leader of a new session; 127 if it cannot start."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.setsid()
            os.chdir(workdir)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            os.execvp(command[0], command)
        except OSError as e:
            os.write(2, f"simple: cannot start {command!r}: {e}\n".encode())
        os._exit(127)
    return pid


def supervise(
    directory: str, memory_limit: int, workdir: str, command: list[str], log_fd: int
) -> None:
    pid = spawn(workdir, command, log_fd)
    write_record(os.path.join(directory, "child.json"), {"pid": pid, "pgid": pid})
    oom = False
    polls = 0
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        polls += 1
        # The direct child every poll; its whole session (a /proc scan) every fourth.
        if memory_limit and (
            rss_bytes(pid) > memory_limit
            or (polls % 4 == 0 and sum(rss for _, rss in session_members(pid)) > memory_limit)
        ):
            oom = True
            kill_session(pid)
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(POLL_S)
    code = os.waitstatus_to_exitcode(status)
    # The session may hold grandchildren; the sandbox ends with all of them.
    kill_session(pid)
    if oom:
        os.write(log_fd, b"simple: killed: resident memory passed the sandbox's memory limit\n")
    write_record(
        os.path.join(directory, "exit.json"),
        {
            "exit_code": 128 - code if code < 0 else code,
            "signal": -code if code < 0 else None,
            "oom_killed": oom,
            "finished_at": time.time(),
        },
    )


def main(argv: list[str]) -> int:
    directory, memory_limit, workdir, command = argv[1], int(argv[2]), argv[3], argv[5:]
    log_fd = os.open(os.path.join(directory, "output.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        supervise(directory, memory_limit, workdir, command, log_fd)
    finally:
        os.close(log_fd)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sys.exit(main(sys.argv))
