"""`simplectl db` and readiness against a schema behind, at, or ahead of this code's head
(a rollback past a migration): ready only where this code can run, one line otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, delete, insert, text

from controller.db.engine import check_ready
from controller.db.revisions import (
    COMPAT_FLOOR,
    SchemaState,
    head_revision,
    known_revisions,
    readable_from,
    schema_of,
)
from controller.db.schema import schema_compat
from controller.errors import UnavailableError

FUTURE = "0999_from_a_newer_release"


def as_if_a_newer_release_migrated(engine: Engine, readable: str) -> None:
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": FUTURE})
        conn.execute(delete(schema_compat))
        conn.execute(insert(schema_compat).values(
            revision=FUTURE, readable_from=readable, written_at=datetime.now(UTC)))


def simplectl(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLE_")}
    env["SIMPLE_DATABASE_URL"] = database_url
    return subprocess.run([sys.executable, "-m", "controller.cli", "db", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_upgrade_records_which_code_can_run_on_the_schema(engine: Engine) -> None:
    with engine.connect() as conn:
        found = schema_of(conn)
        row = conn.execute(schema_compat.select()).one()
    assert found.state is SchemaState.AT_HEAD and found.usable
    assert (row.revision, row.readable_from) == (head_revision(), readable_from())
    assert readable_from() in known_revisions()
    assert known_revisions().index(readable_from()) <= known_revisions().index(COMPAT_FLOOR)


def test_a_rollback_past_additive_migrations_is_ready(engine: Engine) -> None:
    as_if_a_newer_release_migrated(engine, readable=head_revision())
    check_ready(engine)  # this code's head is at or after readable_from: it may serve
    with engine.connect() as conn:
        assert schema_of(conn).state is SchemaState.AHEAD_READABLE


def test_a_rollback_past_a_changing_migration_is_not_ready_and_says_what_to_do(
        engine: Engine) -> None:
    as_if_a_newer_release_migrated(engine, readable=FUTURE)
    with pytest.raises(UnavailableError, match="newer than this code") as caught:
        check_ready(engine)
    assert f"simplectl db downgrade {head_revision()}" in str(caught.value)


def test_a_schema_behind_is_not_ready(engine: Engine) -> None:
    older = known_revisions()[1]
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": older})
    with pytest.raises(UnavailableError, match="behind") as caught:
        check_ready(engine)
    assert "simplectl db upgrade" in str(caught.value)


def test_db_commands_answer_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'simple.db'}"
    assert "state: empty" in simplectl(url, "current").stdout
    assert simplectl(url, "check").returncode == 1
    assert simplectl(url, "upgrade").returncode == 0
    assert simplectl(url, "check").returncode == 0
    refused = simplectl(url, "downgrade", known_revisions()[1])
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert simplectl(url, "check").returncode == 0  # nothing was undone without --yes
    assert simplectl(url, "downgrade", known_revisions()[1], "--yes").returncode == 0
    behind = simplectl(url, "check")
    assert behind.returncode == 1 and "behind" in behind.stderr
    unknown = simplectl(url, "downgrade", "no_such_revision", "--yes")
    assert unknown.returncode == 2 and "unknown revision" in unknown.stderr


def test_an_unreachable_database_is_one_line_and_exit_2(tmp_path: Path) -> None:
    from tests.services import free_port

    url = f"postgresql+psycopg://simple@127.0.0.1:{free_port()}/simple"
    for command in (["upgrade"], ["current"], ["check"], ["upgrade", "--wait", "2"]):
        done = simplectl(url, *command)
        assert done.returncode == 2, (command, done.stderr)
        lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "database unreachable" in lines[0], done.stderr
        assert "Traceback" not in done.stderr


def test_upgrade_leaves_a_newer_readable_schema_and_refuses_an_unreadable_one(
        engine: Engine) -> None:
    """What `serve` does at start after a rollback: it migrated with Alembic, which cannot
    find the newer revision and failed with a traceback."""
    from controller.db.engine import upgrade

    as_if_a_newer_release_migrated(engine, readable=head_revision())
    upgrade(engine)  # nothing to do: this code runs on it
    with engine.connect() as conn:
        assert schema_of(conn).current == FUTURE
        assert conn.execute(schema_compat.select()).one().revision == FUTURE
    as_if_a_newer_release_migrated(engine, readable=FUTURE)
    with pytest.raises(UnavailableError, match="newer than this code") as caught:
        upgrade(engine)
    assert f"simplectl db downgrade {head_revision()}" in str(caught.value)
