"""Where a database's schema stands against this code's migrations, and which controllers
can run on it.

Every migration may declare `additive = True`: the code from before it runs on the schema
it leaves (it only adds tables, nullable columns or indexes). `upgrade` writes, beside
Alembic's revision, the oldest code head that can still run on the schema (`readable_from`),
so a controller rolled back past additive migrations knows it may serve, and one rolled back
past a migration that changed or removed something knows it may not, and says what to do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, delete, insert, inspect, select, text

from controller.db.schema import schema_compat

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# The first revision whose code reads schema_compat: code before it cannot be told anything.
COMPAT_FLOOR = "0016_schema_compat"


class SchemaState(enum.StrEnum):
    EMPTY = "empty"  # no migration applied
    AT_HEAD = "at head"
    BEHIND = "behind"  # migrations of this code still to apply
    AHEAD_READABLE = "ahead, readable"  # newer than this code, which may still run on it
    AHEAD_UNREADABLE = "ahead, not readable"  # newer, and changed what this code relies on


@dataclass(frozen=True)
class Schema:
    current: str | None  # the database's revision
    head: str  # this code's newest migration
    state: SchemaState
    pending: int  # migrations this code would apply (BEHIND)
    readable_from: str | None  # from schema_compat, when the database is ahead

    @property
    def usable(self) -> bool:
        return self.state in (SchemaState.AT_HEAD, SchemaState.AHEAD_READABLE)

    def describe(self) -> str:
        where = self.current or "no migration"
        if self.state is SchemaState.AT_HEAD:
            return f"database schema at {where}, this code's head: ready"
        if self.state is SchemaState.EMPTY:
            return f"database is not migrated (empty); this code's head is {self.head}"
        if self.state is SchemaState.BEHIND:
            return (f"database schema at {where}, {self.pending} migration(s) behind this "
                    f"code's head {self.head}")
        if self.state is SchemaState.AHEAD_READABLE:
            return (f"database schema at {where}, newer than this code ({self.head}), and "
                    f"readable by code from {self.readable_from} on: ready")
        return (f"database schema at {where}, newer than this code ({self.head}) and not "
                f"readable by it (readable from {self.readable_from or 'unknown'} on)")


@cache
def _scripts() -> Any:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS_DIR))


def head_revision() -> str:
    head = _scripts().get_current_head()
    assert head is not None
    return str(head)


def _chain() -> list[Any]:
    """This code's migrations, newest first."""
    return list(_scripts().walk_revisions("base", "heads"))


def known_revisions() -> list[str]:
    """This code's revisions, newest first."""
    return [str(s.revision) for s in _chain()]


def readable_from() -> str:
    """The oldest code head that runs on the schema at this code's head: back from the head
    while each migration is additive, never below COMPAT_FLOOR."""
    oldest = head_revision()
    for script in _chain():
        if script.revision == COMPAT_FLOOR or not getattr(script.module, "additive", False):
            return str(script.revision) if script.revision == COMPAT_FLOOR else oldest
        oldest = str(script.down_revision)
    return oldest


def record_compat(conn: Connection) -> None:
    """After an upgrade to this code's head: which code may run on this schema."""
    conn.execute(delete(schema_compat))
    conn.execute(insert(schema_compat).values(
        revision=head_revision(), readable_from=readable_from(), written_at=datetime.now(UTC)))


def schema_of(conn: Connection) -> Schema:
    """Where the connected database's schema stands against this code."""
    head = head_revision()
    tables = inspect(conn)
    current = None
    if tables.has_table("alembic_version"):
        current = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    if current is None:
        return Schema(None, head, SchemaState.EMPTY, len(_chain()), None)
    if current == head:
        return Schema(current, head, SchemaState.AT_HEAD, 0, None)
    known = known_revisions()
    if current in known:
        return Schema(current, head, SchemaState.BEHIND, known.index(current), None)
    oldest = None
    if tables.has_table("schema_compat"):
        oldest = conn.execute(select(schema_compat.c.readable_from)).scalar()
    state = SchemaState.AHEAD_READABLE if oldest in known else SchemaState.AHEAD_UNREADABLE
    return Schema(current, head, state, 0, oldest)
