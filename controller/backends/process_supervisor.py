"""Supervisor of one process-backend sandbox; run as a script, standard library only.

    python -I -S process_supervisor.py DIR MEMORY_BYTES -- COMMAND...

It starts COMMAND in its own process group with DIR/work as working directory and
output to DIR/output.log, kills it (SIGKILL) if its resident memory passes
MEMORY_BYTES (0 = no limit), and writes DIR/exit.json when it ends. It lives in
its own session, so it outlives a controller that is killed and lets a new
controller read the exit it recorded.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, BinaryIO

POLL_S = 0.05
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def write_json(path: str, data: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def supervise(directory: str, memory_limit: int, command: list[str], log: BinaryIO) -> None:
    try:
        child = subprocess.Popen(
            command,
            cwd=os.path.join(directory, "work"),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as e:
        log.write(f"simple: cannot start {command!r}: {e}\n".encode())
        write_json(
            os.path.join(directory, "exit.json"),
            {"exit_code": 127, "oom_killed": False, "finished_at": time.time()},
        )
        return
    write_json(os.path.join(directory, "child.json"), {"pid": child.pid, "pgid": child.pid})
    oom = False
    while child.poll() is None:
        if memory_limit and rss_bytes(child.pid) > memory_limit:
            oom = True
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            break
        time.sleep(POLL_S)
    code = child.returncode
    # The group may hold grandchildren; the sandbox ends with all of them.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    if oom:
        log.write(b"simple: killed: resident memory passed the sandbox's memory limit\n")
    write_json(
        os.path.join(directory, "exit.json"),
        {
            "exit_code": 128 - code if code < 0 else code,
            "signal": -code if code < 0 else None,
            "oom_killed": oom,
            "finished_at": time.time(),
        },
    )


def main(argv: list[str]) -> int:
    directory, memory_limit, command = argv[1], int(argv[2]), argv[4:]
    with open(os.path.join(directory, "output.log"), "ab", buffering=0) as log:
        supervise(directory, memory_limit, command, log)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sys.exit(main(sys.argv))
