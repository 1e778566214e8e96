"""Database engine creation, migrations and readiness checks."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from controller.db.revisions import (
    MIGRATIONS_DIR,
    Schema,
    SchemaState,
    record_compat,
    schema_of,
)
from controller.errors import ConfigError, UnavailableError
from controller.extras import require_extra

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5


def create_db_engine(url: str) -> Engine:
    """An engine for `url`, tuned for the controller's many short transactions."""
    try:
        parsed = make_url(url)
    except Exception as e:
        raise ConfigError(
            f"SIMPLE_DATABASE_URL is not a database URL: {e}",
            hint="use sqlite:///path/simple.db or postgresql+psycopg://user:pass@host/db",
        ) from e
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        _serialize_sqlite_writes(engine)
        return engine
    if parsed.get_backend_name() == "postgresql":
        require_extra("postgres", "a PostgreSQL SIMPLE_DATABASE_URL")
        return create_engine(
            url,
            # The API's worker threads, the reconciler and the event writer share the pool.
            pool_size=10,
            max_overflow=20,
            pool_timeout=10,
            # Recovery: a connection is tested when taken from the pool, so after a database
            # restart the first use of each stale one reconnects instead of failing.
            pool_pre_ping=True,
            pool_recycle=1800,
            connect_args=_postgres_connect_args(),
        )
    raise ConfigError(
        f"unsupported database {parsed.get_backend_name()!r} in SIMPLE_DATABASE_URL",
        hint="SIMPLE supports SQLite and PostgreSQL",
    )


def _postgres_connect_args() -> dict[str, Any]:
    """libpq options: bounded connect time, and TCP keepalives so that a server that
    vanished (host down, network cut) is noticed in about a minute, not hours."""
    return {
        "connect_timeout": CONNECT_TIMEOUT_S,
        "application_name": "simple-controller",
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
    }


_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def _serialize_sqlite_writes(engine: Engine) -> None:
    """SQLite lets one writer in at a time and makes the others poll for the lock, sleeping
    1 to 100 ms between tries, so a pass's claim could wait a tenth of a second behind an
    exit being recorded. Within this process, writers queue on a lock instead and go in the
    moment it is free: taken at a transaction's first write, released when it ends."""
    lock = threading.RLock()

    def take(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not conn.info.get("writing") and statement.lstrip()[:7].upper().startswith(_WRITES):
            lock.acquire()
            conn.info["writing"] = True

    def release(conn: Any) -> None:
        if conn.info.pop("writing", False):
            lock.release()

    event.listen(engine, "before_cursor_execute", take)
    event.listen(engine, "commit", release)
    event.listen(engine, "rollback", release)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _alembic_config(engine: Engine) -> Any:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["engine"] = engine
    return config


MIGRATION_LOCK = 0x53494D50  # "SIMP": replicas starting together migrate one at a time


def upgrade(engine: Engine) -> None:
    """Apply every pending migration, then record which controllers can run on the schema.
    On PostgreSQL under an advisory lock, so replicas that start at once (API and
    reconcilers) do not run the same migration twice. A schema newer than this code is left
    as it is when this code can run on it, else refused in one line (a rollback)."""
    from alembic import command

    found = schema(engine)
    if found.state is SchemaState.AHEAD_READABLE:  # rolled back past additive migrations
        logger.info("%s; nothing to migrate", found.describe())
        return
    if found.state is SchemaState.AHEAD_UNREADABLE:
        raise UnavailableError(found.describe(), hint=_newer_hint(found))
    if engine.dialect.name != "postgresql":
        command.upgrade(_alembic_config(engine), "head")
    else:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
            try:
                command.upgrade(_alembic_config(engine), "head")
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
                conn.commit()
    with engine.begin() as conn:
        record_compat(conn)
    logger.info("database migrated to head")


def downgrade(engine: Engine, revision: str) -> None:
    """Undo migrations down to `revision` (this code's migrations only)."""
    from alembic import command

    command.downgrade(_alembic_config(engine), revision)
    logger.info("database downgraded to %s", revision)


def schema(engine: Engine) -> Schema:
    """Where the database's schema stands; UnavailableError (one line) if unreachable."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            return schema_of(conn)
    except SQLAlchemyError as e:
        raise UnavailableError(
            f"database unreachable: {type(e).__name__}: {str(e).strip().splitlines()[0]}",
            hint="check SIMPLE_DATABASE_URL and that the server is up",
        ) from e


def check_ready(engine: Engine) -> None:
    """Raise UnavailableError naming the reason unless the DB is reachable and its schema is
    one this code runs on (its head, or a newer one recorded as readable by it)."""
    found = schema(engine)
    if found.usable:
        return
    if found.state in (SchemaState.EMPTY, SchemaState.BEHIND):
        raise UnavailableError(found.describe(), hint="run `simplectl db upgrade`")
    raise UnavailableError(found.describe(), hint=_newer_hint(found))


def _newer_hint(found: Schema) -> str:
    return (f"roll forward to the release that migrated to {found.current}, or with that "
            f"release run `simplectl db downgrade {found.head}` (docs/storage.md#rollbacks)")
