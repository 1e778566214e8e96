"""Issue 17, finding 6: process-backend sandboxes ran as the controller's user (root).

They could read the database and the signing key, signal the controller and each
other, and read each other's environment (sandbox tokens). Now, under root, each
sandbox runs as an unprivileged uid of its own (SIMPLE_PROCESS_USER=auto). Two probe
sandboxes of one run try all of that against the real served controller and each
other, next to a built-in runtime sandbox whose events and upload must still work.
Where the sandbox interpreter is out of a dropped uid's reach (root's Python under
/root), `auto` warns once and runs sandboxes as root; an explicit user fails the launch.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.backends.process.user import DYNAMIC_UIDS
from controller.settings import Settings
from tests.ci.conftest import CATALOG, Served, clean_env
from tests.sandbox_python import require_root

# Probes its own identity and what it can reach, then what it can do to its peer (the
# other probe of the run, found by its command line, which /proc shows to everyone).
PROBE = r"""
import json, os, subprocess, time
report = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
          "home": os.environ.get("HOME"), "cwd": os.getcwd()}
own = os.stat(".")
report["cwd_owner"], report["cwd_mode"] = own.st_uid, oct(own.st_mode & 0o777)
report["no_new_privs"] = open("/proc/self/status").read().split("NoNewPrivs:")[1].split()[0]
with open("secret.txt", "w") as handle:
    handle.write("mine")
config = json.loads(os.environ["SIMPLE_TEMPLATE_CONFIG"])
data_dir = config["data_dir"]
def parent(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])

# The supervisor is this process's parent, forked by the fork server (its parent after a
# restart of it: init), which the controller started.
fork_server = report["fork_server_pid"] = parent(os.getppid())
controller = report["controller_pid"] = parent(fork_server)

def attempt(name, action):
    try:
        action()
        report[name] = "ALLOWED"
    except OSError as e:
        report[name] = type(e).__name__

def read(path):
    with open(path, "rb") as handle:
        handle.read(16)

attempt("read_signing_key", lambda: read(os.path.join(data_dir, "signing.key")))
attempt("read_database", lambda: read(os.path.join(data_dir, "simple.db")))
attempt("list_data_dir", lambda: os.listdir(data_dir))
attempt("signal_controller", lambda: os.kill(controller, 0))
attempt("signal_fork_server", lambda: os.kill(fork_server, 0))
# Its requests (what to run, as whom) come through its stdin: write one of our own.
attempt("write_fork_server", lambda: open(f"/proc/{fork_server}/fd/0", "wb").close())
attempt("read_supervisor_cwd", lambda: os.readlink(f"/proc/{os.getppid()}/cwd"))
attempt("list_work_root", lambda: os.listdir(os.path.dirname(os.path.dirname(os.getcwd()))))
me = open("/proc/self/cmdline", "rb").read()

# Where the peer works: beside this one, under the peer's sandbox id (nothing shows it:
# the supervisors' command lines no longer carry it, their working directories are root's).
own_id = os.environ["SIMPLE_SANDBOX_ID"]
peer_id = (own_id.replace("probe-a", "probe-b") if "probe-a" in own_id
           else own_id.replace("probe-b", "probe-a"))
peer_work = os.path.join(os.path.dirname(os.path.dirname(os.getcwd())), peer_id, "attempt-1")

# (pid, uid) if pid runs this script under a supervisor (not, say, a child the peer
# forked that has not exec'ed yet: it has the same command line).
def supervised_peer(pid):
    status = open(f"/proc/{pid}/status").read()
    argv = open(f"/proc/{parent(pid)}/cmdline", "rb").read().split(b"\0")
    if open(f"/proc/{pid}/cmdline", "rb").read() == me and argv[3].endswith(b"supervisor.py"):
        return pid, int(status.split("Uid:")[1].split()[0])
    return None

peer = None
for _ in range(600):
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                peer = supervised_peer(int(name)) or peer
            except (OSError, IndexError, ValueError):
                pass
    if peer:
        break
    time.sleep(0.1)
if peer:
    time.sleep(1)  # let it write its secret
    peer, report["peer_uid"] = peer
    report["peer_work"] = peer_work
    attempt("read_peer_secret", lambda: read(os.path.join(peer_work, "secret.txt")))
    attempt("list_peer_work", lambda: os.listdir(peer_work))
    attempt("signal_peer", lambda: os.kill(peer, 0))
    attempt("read_peer_environ", lambda: read(f"/proc/{peer}/environ"))  # its token
# A process that leaves the session (setsid), to outlive the sandbox if it can.
report["straggler"] = subprocess.Popen(["sleep", "300"], start_new_session=True).pid
print("PROBE " + json.dumps(report), flush=True)
time.sleep(3)  # stay until the peer has probed this one
"""

PROBE_TEMPLATES = """
  - id: probe_a
    category: security
    description: reports whom it runs as and what it can reach
    estimate: {{cost_usd: [0.0, 0.1], runtime_s: [1, 2]}}
    timeout_s: 120
    command: [python, {probe}]
    config: {{data_dir: {data_dir}}}
  - id: probe_b
    category: security
    description: the same probe, for a second sandbox of the run
    estimate: {{cost_usd: [0.0, 0.1], runtime_s: [1, 2]}}
    timeout_s: 120
    command: [python, {probe}]
    config: {{data_dir: {data_dir}}}
"""

DENIED = "PermissionError"


@pytest.fixture
def settings(open_dir: Path, sandbox_python: str, database_url: str) -> Settings:
    """The data directory (and SQLite file) where others could reach them but for the
    data directory's own mode (pytest's tmp_path is 0700 already); sandboxes as their
    own users."""
    data_dir = open_dir / "data"
    if database_url.startswith("sqlite"):
        database_url = f"sqlite:///{data_dir / 'simple.db'}"
    return Settings(
        data_dir=data_dir,
        database_url=database_url,
        retry_base_s=0.05,
        retry_max_s=0.2,
        reconcile_interval_s=0.2,
        lost_grace_s=2.0,
        process_user="auto",
        process_python=sandbox_python,
    )


@pytest.fixture
def ci_catalog(open_dir: Path, settings: Settings, catalog_dir: Callable[..., Path]) -> Path:
    """The `ci` catalog plus the two probes (their script where a sandbox may read it)."""
    probe = open_dir / "probe.py"
    probe.write_text(PROBE)
    probe.chmod(0o644)
    templates = PROBE_TEMPLATES.format(
        probe=json.dumps(str(probe)), data_dir=json.dumps(str(settings.data_dir))
    )
    return catalog_dir(ci_catalog_text(probe, templates), "ci.yaml")


def ci_catalog_text(script: Path, extra_templates: str = "") -> str:
    """The `ci` catalog, its own script templates pointed at `script` (they stay unused)."""
    text = CATALOG.replace("suites:", extra_templates.lstrip("\n") + "suites:", 1)
    for name in ("token_script", "garbled_script"):
        text = text.replace("{" + name + "}", json.dumps(str(script)))
    return text


def probe_report(served: Served, sandbox: dict[str, Any]) -> dict[str, Any]:
    with served.client() as http:
        text = http.get(f"/v1/sandboxes/{sandbox['sandbox_id']}/logs").text
    lines = [line for line in text.splitlines() if line.startswith("PROBE ")]
    assert lines, f"the probe did not report: {sandbox}\n{text}\n{served.log()[-3000:]}"
    return dict(json.loads(lines[-1].removeprefix("PROBE ")))


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sandboxes_run_as_their_own_users_and_reach_neither_the_controller_nor_each_other(
    served: Served, settings: Settings
) -> None:
    with served.client() as http:
        run_id = http.post(
            "/v1/runs", json={"templates": ["probe_a", "probe_b", "ci_ok"]}
        ).json()["run_id"]
    run = served.wait_run(run_id, timeout_s=120)
    sandboxes = {s["template_id"]: s for s in run["sandboxes"]}
    reports = [probe_report(served, sandboxes[t]) for t in ("probe_a", "probe_b")]
    stragglers = [r["straggler"] for r in reports]
    try:
        # The whole run still works: the built-in runtime posts events and uploads.
        assert run["status"] == "succeeded", run
        ci_ok = sandboxes["ci_ok"]
        assert ci_ok["aggregated"] and ci_ok["last_seq"] > 0 and ci_ok["cost_usd"] > 0, ci_ok
        assert ci_ok["step"] == ci_ok["steps_total"] == 2, ci_ok

        a, b = reports
        assert a["uid"] != 0 and b["uid"] != 0 and a["uid"] != b["uid"], reports
        for report, peer in ((a, b), (b, a)):
            assert report["uid"] in DYNAMIC_UIDS and report["gid"] == report["uid"], report
            assert report["groups"] == [] and report["no_new_privs"] == "1", report
            assert report["home"] == report["cwd"], report
            assert (report["cwd_owner"], report["cwd_mode"]) == (report["uid"], "0o700"), report
            assert report["controller_pid"] == served.process.pid, report
            assert report["peer_uid"] == peer["uid"] and report["peer_work"] == peer["cwd"]
            for action in ("read_signing_key", "read_database", "list_data_dir",
                           "signal_controller", "signal_fork_server", "write_fork_server",
                           "read_supervisor_cwd",
                           "list_work_root", "read_peer_secret",
                           "list_peer_work", "signal_peer", "read_peer_environ"):
                assert report[action] == DENIED, (action, report)
        assert (settings.data_dir / "signing.key").exists()
        # A process that left the sandbox's session still ended with it.
        assert not [pid for pid in stragglers if alive(pid)], "a sandbox process outlived it"
        assert served.process.poll() is None
    finally:
        for pid in stragglers:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_auto_falls_back_to_the_controllers_user_with_one_warning(
    tmp_path: Path, private_python: str, catalog_dir: Callable[..., Path]
) -> None:
    """Like `make quick` as root where root's Python is private: it works, and says so once."""
    require_root()
    catalog = catalog_dir(ci_catalog_text(tmp_path / "unused.py"), "ci.yaml")
    env = clean_env(SIMPLE_DATA_DIR=str(tmp_path / "data"), SIMPLE_PROCESS_PYTHON=private_python)
    env.pop("SIMPLE_PROCESS_USER", None)  # the default, auto
    done = subprocess.run(
        [sys.executable, "-m", "controller.cli", "run", "ci_ok", "ci_steps", "--catalog",
         str(catalog), "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["status"] == "succeeded"
    noisy = [line for line in done.stderr.splitlines()
             if any(word in line for word in ("WARNING", "ERROR", "Traceback"))]
    assert len(noisy) == 1, done.stderr
    private_dir = str(Path(private_python).parent)
    assert f"{private_dir} is mode 0700" in noisy[0], noisy[0]
    assert "SIMPLE_PROCESS_PYTHON" in noisy[0] and "SIMPLE_PROCESS_USER=self" in noisy[0]


def test_an_explicit_user_that_cannot_run_sandboxes_fails_the_launch(
    serve: Callable[..., Served], private_python: str
) -> None:
    served = serve(SIMPLE_PROCESS_USER="nobody", SIMPLE_PROCESS_PYTHON=private_python)
    with served.client() as http:
        run_id = http.post("/v1/runs", json={"templates": ["ci_ok"]}).json()["run_id"]
    run = served.wait_run(run_id, timeout_s=60)
    sandbox = run["sandboxes"][0]
    assert run["status"] == "failed" and sandbox["status"] == "failed", run
    error = sandbox["error"]
    assert error.startswith("launch failed: SIMPLE_PROCESS_USER: uid 65534 cannot run"), error
    assert f"{Path(private_python).parent} is mode 0700" in error, error
