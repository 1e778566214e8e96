"""A client that never lies (issue 31): an empty server is an error, not the embedded
controller in disguise; `--require-server` refuses to run anything on the runner;
`--version`; `ask` that waits for a yes says so in its exit code."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from controller.cli.common import SANDBOX_PAGE_MAX, Exit, Priority, parse_duration
from tests.ci.conftest import SIMPLECTL, Served, ServeFactory, clean_env

ROOT = Path(__file__).resolve().parents[2]


def simplectl(
    *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SIMPLECTL, *args], capture_output=True, text=True, timeout=timeout, env=env,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def offline(tmp_path: Path) -> tuple[dict[str, str], Path]:
    data_dir = tmp_path / "cli-data"
    return clean_env(SIMPLE_DATA_DIR=str(data_dir)), data_dir


@pytest.mark.parametrize(
    ("args", "extra_env", "named"),
    [
        (["run", "quick"], {"SIMPLE_SERVER": ""}, "SIMPLE_SERVER is set but empty"),
        (["run", "quick"], {"SIMPLE_SERVER": "  "}, "SIMPLE_SERVER is set but empty"),
        (["run", "quick", "--server", ""], {}, "--server is empty"),
        (["--server", "", "run", "quick"], {}, "--server is empty"),
        (["status"], {"SIMPLE_SERVER": ""}, "SIMPLE_SERVER is set but empty"),
        (["ask", "--yes", "run", "quick"], {"SIMPLE_SERVER": ""}, "SIMPLE_SERVER is set but empty"),
    ],
    ids=["env-run", "env-blank", "option", "global-option", "env-status", "env-ask"],
)
def test_an_empty_server_is_exit_2_in_one_line_and_starts_nothing(
    offline: tuple[dict[str, str], Path], args: list[str], extra_env: dict[str, str], named: str
) -> None:
    env, data_dir = offline
    done = simplectl(*args, env={**env, **extra_env})
    assert done.returncode == Exit.USAGE, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and named in done.stderr, done.stderr
    assert not data_dir.exists(), "no embedded controller was started"


@pytest.mark.parametrize(
    ("args", "extra_env"),
    [
        (["--require-server", "run", "quick"], {}),
        (["run", "quick"], {"SIMPLE_REQUIRE_SERVER": "1"}),
        (["--require-server", "status"], {}),
        (["--require-server", "ask", "--yes", "run", "quick"], {}),
    ],
    ids=["run", "env-run", "status", "ask"],
)
def test_require_server_refuses_the_embedded_controller(
    offline: tuple[dict[str, str], Path], args: list[str], extra_env: dict[str, str]
) -> None:
    env, data_dir = offline
    done = simplectl(*args, env={**env, **extra_env})
    assert done.returncode == Exit.USAGE, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "--require-server" in done.stderr, done.stderr
    assert "needs --server URL or SIMPLE_SERVER" in done.stderr
    assert not data_dir.exists(), "no embedded controller was started"


def test_require_server_with_a_server_runs_there(served: Served) -> None:
    done = served.simplectl(
        "--require-server", *served.remote("run", "ci-ok", "--json"),
    )
    assert done.returncode == 0, done.stderr
    assert len(served.runs()) == 1, "the run is on the served controller"


def test_version_is_the_package_version(offline: tuple[dict[str, str], Path]) -> None:
    env, data_dir = offline
    done = simplectl("--version", env=env)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("version")
    from controller import __version__

    assert done.returncode == 0, done.stderr
    assert done.stdout == f"simplectl {__version__}\n"
    assert version in (None, __version__), "pyproject's version is the package's"
    assert not data_dir.exists()


def test_ask_waiting_for_a_yes_exits_6(serve: ServeFactory) -> None:
    served = serve(SIMPLE_CONFIRM_ABOVE_USD="0.01")  # every ci template costs more
    held = served.simplectl(*served.remote("ask", "run", "ci_ok"))
    assert held.returncode == Exit.NEEDS_YES == 6, held.stdout + held.stderr
    assert "nothing was done" in held.stderr
    assert served.runs() == []
    started = served.simplectl(*served.remote("ask", "--yes", "run", "ci_ok"))
    assert started.returncode == 0, started.stdout + started.stderr
    assert len(served.runs()) == 1
    planned = served.simplectl(*served.remote("ask", "plan", "ci_ok"))
    assert planned.returncode == 0, "a plan asked for is what was asked: done"


def test_client_side_copies_match_the_server(offline: tuple[dict[str, str], Path]) -> None:
    from controller.planning.model import Priority as PlannerPriority
    from controller.runs import SANDBOX_PAGE_MAX as SERVER_PAGE_MAX

    assert {p.value for p in Priority} == {p.value for p in PlannerPriority}
    assert SANDBOX_PAGE_MAX == SERVER_PAGE_MAX


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("900", 900), ("90s", 90), ("15m", 900), ("1h30m", 5400), ("2.5s", 2.5), ("1h", 3600)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "15 minutes", "-3", "1d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)
