"""Shared fixtures: settings on a private data dir, a served controller, custom catalogs.

The database is SQLite unless SIMPLE_TEST_DATABASE_URL names a PostgreSQL server,
in which case each test gets a fresh database on it (CI runs the suite on both).
"""

from __future__ import annotations

import os
import secrets
import sys
import textwrap
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from controller.db.engine import create_db_engine, upgrade
from controller.settings import Settings

IN_CI = os.environ.get("CI", "").lower() == "true"
SESSION_STARTED = time.time()  # what the session leaves is what was made after this

# Test sandboxes run scripts from, and write to, pytest's tmp_path, which only the user
# running the suite may enter (0700): so they run as that user, not as the unprivileged
# uids the process backend picks by default under root, and the suite behaves the same
# on every machine. tests/security/test_process_user.py runs sandboxes as other users.
os.environ["SIMPLE_PROCESS_USER"] = "self"


def require_service(name: str, reason: str) -> None:
    """A missing real service: a failure in CI, a skip elsewhere."""
    message = f"{name} is not available: {reason}"
    if IN_CI:
        pytest.fail(message + " (CI needs it; .ci/run installs it)")
    pytest.skip(message)


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database for one test."""
    server = os.environ.get("SIMPLE_TEST_DATABASE_URL")
    if not server:
        yield f"sqlite:///{tmp_path / 'simple.db'}"
        return
    from sqlalchemy import create_engine, text

    name = "t_" + secrets.token_hex(6)
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    base, _, _ = server.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on `database_url`, migrated to the latest schema."""
    engine = create_db_engine(database_url)
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    """Embedded-default settings on a private data dir, fast retries and passes."""
    return Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        retry_base_s=0.05,
        retry_max_s=0.2,
        reconcile_interval_s=0.2,
        lost_grace_s=2.0,
    )


@pytest.fixture
def catalog_dir(tmp_path: Path) -> Callable[[str], Path]:
    """Write a catalog file (YAML text) into a fresh directory and return the directory."""

    def write(yaml_text: str, name: str = "user.yaml") -> Path:
        directory = tmp_path / f"catalog-{secrets.token_hex(3)}"
        directory.mkdir()
        (directory / name).write_text(textwrap.dedent(yaml_text))
        return directory

    return write


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Name the threads still running when the tests end (a test that leaves a controller,
    a backend watcher or an informer behind): at exit they die wherever they stand, and
    one caught inside native code has aborted the interpreter (exit 134 after a green
    PostgreSQL pass)."""
    left = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if left:
        frames = sys._current_frames()
        print(f"\n{len(left)} thread(s) still running after the tests:", file=sys.stderr)
        for thread in left:
            frame = frames.get(thread.ident or 0)
            where = traceback.extract_stack(frame)[-1] if frame else None
            print(f"  {thread.name} (daemon={thread.daemon}) at {where}", file=sys.stderr)
    if hasattr(session.config, "workerinput") or os.environ.get("SIMPLE_TEST_NO_LEAK_CHECK"):
        return  # an xdist worker: the main process checks once everything has ended
    from tests.leaks import leftovers

    left = leftovers(SESSION_STARTED)
    if left:
        print(f"\nleaks: the tests left {len(left)} thing(s) behind:", file=sys.stderr)
        for thing in left[:30]:
            print(f"  {thing}", file=sys.stderr)
        if IN_CI and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif not session.config.option.collectonly:
        print("\nleaks: 0 (no SIMPLE container, sandbox process or simple-work-* directory "
              "left)", file=sys.stderr)



def pytest_unconfigure(config: pytest.Config) -> None:
    """One line at the very end (after pytest's own summary): how many tests skipped, for
    which missing part, and the command that installs it (each skip's reason says it)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or hasattr(config, "workerinput"):  # an xdist worker: the main one says it
        return
    reasons: Counter[str] = Counter()
    for report in reporter.stats.get("skipped", []):
        longrepr = report.longrepr
        message = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[message.removeprefix("Skipped: ")] += 1
    if reasons:
        parts = "; ".join(f"{n} because {reason}" for reason, n in reasons.most_common())
        reporter.write_line(f"skipped {sum(reasons.values())}: {parts}", yellow=True)
    elif reporter.stats.get("passed"):
        reporter.write_line("skipped 0: every test ran", green=True)
