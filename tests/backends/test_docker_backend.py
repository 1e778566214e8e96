"""DockerBackend against the real engine, with the real simple-sandbox:latest image.

No controller runs here: sandboxes run small python one-liners as their command,
with a contract environment that points at a dummy URL. Tests without the
`docker` marker use a fake client and need no engine.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import requests
from docker.errors import APIError, DockerException, ImageNotFound

from controller.backends.base import Observed, ObservedState, SandboxSpec
from controller.backends.docker.backend import DockerBackend
from controller.backends.docker.errors import is_transient
from controller.backends.docker.exits import epoch_seconds
from controller.backends.docker.spec import build_container_spec
from controller.errors import BackendError, NotFoundError, UnavailableError
from controller.settings import Settings
from tests.docker_support import PROBE

MakeSpec = Callable[..., SandboxSpec]  # the `make_spec` fixture of conftest.py

MEMORY_HOG = "chunks = []\nwhile True:\n    chunks.append(b'x' * (1 << 20))"
SLEEP = ["python", "-c", "import time; time.sleep(300)"]


def settings(tmp_path: Path, **overrides: Any) -> Settings:
    return Settings(data_dir=tmp_path, backend="docker", **overrides)


@pytest.fixture
def backend(sandbox_image: str, tmp_path: Path) -> Iterator[DockerBackend]:
    docker_backend = DockerBackend(settings(tmp_path))
    yield docker_backend
    docker_backend.close()


def find(backend: DockerBackend, sandbox_id: str) -> Observed | None:
    return next((o for o in backend.observe() if o.sandbox_id == sandbox_id), None)


def wait_for(
    backend: DockerBackend, sandbox_id: str, state: ObservedState, timeout_s: float = 60
) -> Observed:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        observed = find(backend, sandbox_id)
        if observed is not None and observed.state is state:
            return observed
        time.sleep(0.2)
    pytest.fail(f"sandbox {sandbox_id} did not reach {state} within {timeout_s}s")


# -- against the real engine ---------------------------------------------------


@pytest.mark.docker
def test_exit_code_is_reported(
    backend: DockerBackend, make_spec: MakeSpec, docker_run_id: str
) -> None:
    sandbox_id = f"{docker_run_id}-exit"
    command = ["python", "-c", "raise SystemExit(42)"]
    launched = time.time()
    backend.launch(make_spec(sandbox_id, run_id=docker_run_id, command=command))
    observed = wait_for(backend, sandbox_id, ObservedState.EXITED)
    assert observed.exit_code == 42
    assert observed.oom_killed is False
    assert (observed.run_id, observed.attempt) == (docker_run_id, 1)
    assert observed.exited_at is not None
    assert launched - 5 < observed.exited_at < time.time() + 5


@pytest.mark.docker
def test_memory_hog_is_oom_killed(
    backend: DockerBackend, make_spec: MakeSpec, docker_run_id: str
) -> None:
    sandbox_id = f"{docker_run_id}-oom"
    spec = make_spec(
        sandbox_id, run_id=docker_run_id, command=["python", "-c", MEMORY_HOG], memory="32Mi"
    )
    backend.launch(spec)
    observed = wait_for(backend, sandbox_id, ObservedState.EXITED)
    assert observed.oom_killed is True
    assert observed.exit_code != 0


@pytest.mark.docker
def test_stop_and_remove_are_idempotent(
    backend: DockerBackend, make_spec: MakeSpec, docker_run_id: str
) -> None:
    sandbox_id = f"{docker_run_id}-stop"
    backend.launch(make_spec(sandbox_id, run_id=docker_run_id, command=SLEEP))
    wait_for(backend, sandbox_id, ObservedState.RUNNING)
    started = time.monotonic()
    backend.stop(sandbox_id)
    assert time.monotonic() - started < 15
    observed = wait_for(backend, sandbox_id, ObservedState.EXITED, timeout_s=10)
    assert observed.oom_killed is False
    backend.stop(sandbox_id)  # already stopped
    backend.remove(sandbox_id)
    backend.remove(sandbox_id)  # already gone
    backend.stop(sandbox_id)  # gone
    assert find(backend, sandbox_id) is None
    with pytest.raises(NotFoundError):
        backend.read_logs(sandbox_id)


@pytest.mark.docker
def test_container_is_locked_down(
    backend: DockerBackend, make_spec: MakeSpec, docker_run_id: str, docker_client: Any
) -> None:
    sandbox_id = f"{docker_run_id}-probe"
    spec = make_spec(
        sandbox_id,
        run_id=docker_run_id,
        command=["python", "-c", PROBE],
        memory="64Mi",
        cpu="500m",
        pids=32,
    )
    backend.launch(spec)
    assert wait_for(backend, sandbox_id, ObservedState.EXITED).exit_code == 0
    probe = json.loads(backend.read_logs(sandbox_id).decode().strip().splitlines()[-1])
    assert probe["uid"] != 0 and probe["gid"] != 0
    assert probe["root_writable"] is False
    assert probe["work_writable"] is True and probe["tmp_writable"] is True
    assert int(probe["cap_eff"], 16) == 0
    assert probe["no_new_privs"] == "1"
    assert probe["cwd"] == "/work"
    assert probe["sandbox_id"] == sandbox_id

    host_config = docker_client.api.inspect_container(sandbox_id)["HostConfig"]
    assert host_config["ReadonlyRootfs"] is True
    assert host_config["CapDrop"] == ["ALL"]
    assert host_config["SecurityOpt"] == ["no-new-privileges:true"]
    assert host_config["Memory"] == host_config["MemorySwap"] == 64 * 2**20
    assert host_config["NanoCpus"] == 500_000_000
    assert host_config["PidsLimit"] == 32
    assert set(host_config["Tmpfs"]) == {"/work", "/tmp"}


@pytest.mark.docker
def test_a_new_backend_finds_containers_by_label(
    sandbox_image: str, make_spec: MakeSpec, docker_run_id: str, tmp_path: Path
) -> None:
    running_id, exited_id = f"{docker_run_id}-live", f"{docker_run_id}-done"
    first = DockerBackend(settings(tmp_path))
    first.launch(make_spec(running_id, run_id=docker_run_id, command=SLEEP, attempt=2))
    first.launch(make_spec(exited_id, run_id=docker_run_id, command=["python", "-c", "exit(3)"]))
    wait_for(first, exited_id, ObservedState.EXITED)
    first.close()

    second = DockerBackend(settings(tmp_path))  # as after a controller restart
    try:
        live = wait_for(second, running_id, ObservedState.RUNNING)
        assert (live.run_id, live.attempt) == (docker_run_id, 2)
        done = wait_for(second, exited_id, ObservedState.EXITED)
        assert (done.exit_code, done.oom_killed) == (3, False)
        second.stop(running_id)
        assert wait_for(second, running_id, ObservedState.EXITED).exit_code != 0
    finally:
        second.close()


@pytest.mark.docker
def test_missing_image_is_not_transient(
    backend: DockerBackend, make_spec: MakeSpec, docker_run_id: str
) -> None:
    sandbox_id = f"{docker_run_id}-noimage"
    spec = make_spec(sandbox_id, run_id=docker_run_id, image="simple-no-such-image:never")
    with pytest.raises(BackendError) as info:
        backend.launch(spec)
    assert info.value.transient is False
    assert "simple-no-such-image:never" in info.value.message
    assert info.value.hint is not None and "make images" in info.value.hint
    assert isinstance(info.value.__cause__, ImageNotFound)
    assert find(backend, sandbox_id) is None


@pytest.mark.docker
def test_missing_command_exits_127_and_says_why(
    backend: DockerBackend, make_spec: MakeSpec, docker_run_id: str
) -> None:
    # The container's init starts fine and then fails to exec the command.
    sandbox_id = f"{docker_run_id}-nocmd"
    backend.launch(make_spec(sandbox_id, run_id=docker_run_id, command=["/no/such/binary"]))
    observed = wait_for(backend, sandbox_id, ObservedState.EXITED)
    assert (observed.exit_code, observed.oom_killed) == (127, False)
    assert b"/no/such/binary" in backend.read_logs(sandbox_id)


@pytest.mark.docker
def test_relaunch_replaces_the_earlier_attempt(
    backend: DockerBackend, make_spec: MakeSpec, docker_run_id: str
) -> None:
    sandbox_id = f"{docker_run_id}-retry"
    backend.launch(make_spec(sandbox_id, run_id=docker_run_id, command=SLEEP))
    backend.launch(make_spec(sandbox_id, run_id=docker_run_id, command=SLEEP, attempt=2))
    mine = [o for o in backend.observe() if o.sandbox_id == sandbox_id]
    assert [o.attempt for o in mine] == [2]


@pytest.mark.docker
def test_follow_logs_streams_until_exit(
    backend: DockerBackend, make_spec: MakeSpec, docker_run_id: str
) -> None:
    sandbox_id = f"{docker_run_id}-follow"
    script = "import sys, time\nfor i in range(5):\n    print('line', i)\n    time.sleep(0.2)\n"
    script += "print('oops', file=sys.stderr)"
    backend.launch(make_spec(sandbox_id, run_id=docker_run_id, command=["python", "-c", script]))

    def is_running() -> bool:
        observed = find(backend, sandbox_id)
        return observed is not None and observed.state is not ObservedState.EXITED

    followed = b"".join(backend.follow_logs(sandbox_id, is_running, poll_s=0.1))
    assert followed == backend.read_logs(sandbox_id)
    assert followed.splitlines() == [b"line 0", b"line 1", b"line 2", b"line 3", b"line 4", b"oops"]


@pytest.mark.docker
def test_notify_wakes_on_exit(
    sandbox_image: str, make_spec: MakeSpec, docker_run_id: str, tmp_path: Path
) -> None:
    woken = threading.Event()
    notifying = DockerBackend(settings(tmp_path), notify=woken.set)
    try:
        sandbox_id = f"{docker_run_id}-notify"
        notifying.launch(make_spec(sandbox_id, run_id=docker_run_id, command=["python", "-c", "1"]))
        assert woken.wait(30)
        assert wait_for(notifying, sandbox_id, ObservedState.EXITED).exit_code == 0
    finally:
        notifying.close()


@pytest.mark.docker
def test_check_passes_on_a_live_engine(backend: DockerBackend) -> None:
    backend.check()


@pytest.mark.docker
def test_check_names_a_missing_network(sandbox_image: str, tmp_path: Path) -> None:
    bad = DockerBackend(settings(tmp_path, docker_network="simple-no-such-network"))
    try:
        with pytest.raises(UnavailableError, match="simple-no-such-network"):
            bad.check()
    finally:
        bad.close()


# -- without an engine -----------------------------------------------------------


def _api_error(status: int) -> APIError:
    response = requests.Response()
    response.status_code = status
    return APIError("engine said no", response=response)


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (_api_error(500), True),
        (_api_error(503), True),
        (_api_error(409), True),
        (_api_error(400), False),
        (_api_error(404), False),
        (ImageNotFound("no such image"), False),
        (requests.ConnectionError("refused"), True),
        (requests.ReadTimeout("slow"), True),
        (DockerException("odd"), False),
        (ValueError("bug"), False),
    ],
)
def test_only_known_transient_errors_are_transient(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        ("2026-11-21T05:42:23.123456789Z", 1795239743.123456),
        ("2026-11-21T05:42:23Z", 1795239743.0),
        ("2026-11-21T06:42:23.5+01:00", 1795239743.5),
        ("0001-01-01T00:00:00Z", None),  # the engine's "never"
        ("", None),
        (None, None),
        ("garbage", None),
    ],
)
def test_engine_times_become_epoch_seconds(timestamp: str | None, expected: float | None) -> None:
    assert epoch_seconds(timestamp) == expected


def _unreachable() -> Any:
    raise DockerException("Error while fetching server API version: connection refused")


def test_render_needs_no_engine(make_spec: MakeSpec, tmp_path: Path) -> None:
    offline = DockerBackend(
        settings(tmp_path, docker_network="host", docker_runtime_user="2000:2000"),
        client_factory=_unreachable,
    )
    spec = make_spec(memory="64Mi")
    assert offline.render(spec) == build_container_spec(spec, user="2000:2000", network="host")


def test_unreachable_engine(make_spec: MakeSpec, tmp_path: Path) -> None:
    offline = DockerBackend(settings(tmp_path), client_factory=_unreachable)
    with pytest.raises(UnavailableError, match="Docker engine unreachable") as info:
        offline.check()
    assert info.value.hint is not None and "DOCKER_HOST" in info.value.hint
    with pytest.raises(BackendError) as launch_error:
        offline.launch(make_spec())
    assert launch_error.value.transient is True


def test_follow_logs_falls_back_to_polling_without_repeating(tmp_path: Path) -> None:
    def broken_stream() -> Iterator[bytes]:
        yield b"ab"
        raise requests.ConnectionError("engine went away")

    client = mock.Mock()
    client.api.logs.side_effect = lambda *a, stream=False, follow=False, **kw: (
        mock.Mock(__iter__=lambda self: broken_stream()) if follow else iter([b"ab", b"cd"])
    )
    fake = DockerBackend(settings(tmp_path), client_factory=lambda: client)
    assert list(fake.follow_logs("sbx-1", is_running=lambda: False)) == [b"ab", b"cd"]


@pytest.mark.docker
def test_a_template_secret_reaches_the_container_by_name_only(
    sandbox_image: str, make_spec: MakeSpec, docker_run_id: str, tmp_path: Path
) -> None:
    """The value is read from the secret store at launch and handed to the container;
    the spec (what the controller records and renders) holds only the reference."""
    import dataclasses
    import hashlib

    key = "sk-docker-7d1e0b9c2a"
    store = tmp_path / "store"
    (store / "openai").mkdir(parents=True)
    (store / "openai" / "api-key").write_text(key + "\n")
    digest = hashlib.sha256(key.encode()).hexdigest()
    check = ("import hashlib, os; raise SystemExit(0 if hashlib.sha256(os.environ.get("
             f"'OPENAI_API_KEY', '').encode()).hexdigest() == {digest!r} else 3)")
    sandbox_id = f"{docker_run_id}-key"
    spec = dataclasses.replace(
        make_spec(sandbox_id, run_id=docker_run_id, command=["python", "-c", check]),
        secrets=(("openai", "api-key", "OPENAI_API_KEY"),))
    backend = DockerBackend(settings(tmp_path, template_secrets_dir=store))
    try:
        assert key not in json.dumps(backend.render(spec))
        backend.launch(spec)
        assert wait_for(backend, sandbox_id, ObservedState.EXITED).exit_code == 0
    finally:
        backend.close()


@pytest.mark.docker
def test_a_flood_is_bounded_by_the_engine_and_the_log_budget(
    sandbox_image: str, tmp_path: Path, make_spec: MakeSpec, docker_run_id: str
) -> None:
    """Finding 1 (issue 25) on Docker: the container's log is rotated by the engine
    (json-file max-size/max-file from SIMPLE_LOG_BUDGET), and reading it keeps head and
    tail within the budget, the middle counted, never the whole stream in memory."""
    budget = 256 * 1024
    flooding = DockerBackend(settings(tmp_path, log_budget=budget))
    sandbox_id = f"{docker_run_id}-flood"
    script = "import sys\nfor i in range(40):\n    sys.stdout.write(f'{i:04d}' * 65536)\n"
    script += "print('THE END')"
    try:
        flooding.launch(make_spec(sandbox_id, run_id=docker_run_id,
                                  command=["python", "-c", script]))
        wait_for(flooding, sandbox_id, ObservedState.EXITED)
        config = flooding._docker().api.inspect_container(sandbox_id)["HostConfig"]["LogConfig"]
        assert config == {"Type": "json-file", "Config": {"max-size": "128k", "max-file": "2"}}
        # 10 MiB written; the engine kept the latest ~256 KiB, and reading stays in budget.
        kept = flooding.read_logs(sandbox_id)
        assert 0 < len(kept) <= budget
        assert kept.rstrip().endswith(b"THE END") and not kept.startswith(b"0000")
        # A smaller budget on what the engine kept: head and tail, the middle counted.
        reader = DockerBackend(settings(tmp_path, log_budget=64 * 1024))
        view = reader.open_logs(sandbox_id)
        cut = b"".join(view.chunks)
        reader.close()
        assert view.dropped > 0
        assert b"[\xe2\x80\xa6 %d bytes dropped by SIMPLE's log budget" % view.dropped in cut
        assert len(cut) <= 64 * 1024 + 100 and cut.rstrip().endswith(b"THE END")
    finally:
        flooding.remove(sandbox_id)
        flooding.close()
