"""An untrusted snapshot opened under a budget, and the allowlist of what it may hold.

A snapshot is a file a sandbox wrote: its schema can make reading it cost anything
(a generated column that builds a 200 MB string per row, a CHECK constraint or an
expression index that `quick_check` evaluates, views and triggers). Rather than look
for each trick, the reader uses SQLite's own controls:

- limits on every connection (longest value, SQL text, expression depth, …), a small
  page cache and no memory map, so no value or query can grow past a few megabytes;
- a progress handler that aborts any statement once the reading thread has used
  its CPU budget;
- before any row is read, an allowlist built from the contract
  (`sandbox_image.contract.SNAPSHOT_COLUMN_TYPES`): the contract tables must be plain
  tables whose columns are declared with the contract's types; generated columns,
  virtual tables, views, triggers and expression indexes anywhere, and CHECK
  constraints or extra indexes on the contract tables, reject the file with a reason.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from controller.errors import SnapshotRejected

CPU_BUDGET_S = 2.0
# Longest string, blob or row SQLite will build while reading (the contract's longest
# value is 4,000 characters).
MAX_VALUE_BYTES = 1_000_000
CACHE_KIB = 8 * 1024
PROGRESS_EVERY = 1_000  # virtual-machine steps between two budget checks

_LIMITS = {
    sqlite3.SQLITE_LIMIT_LENGTH: MAX_VALUE_BYTES,
    sqlite3.SQLITE_LIMIT_SQL_LENGTH: 100_000,
    sqlite3.SQLITE_LIMIT_COLUMN: 1_000,
    sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 100,
    sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 4,
    sqlite3.SQLITE_LIMIT_VDBE_OP: 50_000,
    sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 8,
    sqlite3.SQLITE_LIMIT_ATTACHED: 0,
    sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: 100,
    sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER: 100,
    sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 1,
}
_PRAGMAS = (
    "PRAGMA trusted_schema=OFF",
    "PRAGMA query_only=ON",
    "PRAGMA cell_size_check=ON",
    f"PRAGMA cache_size=-{CACHE_KIB}",
    "PRAGMA mmap_size=0",
    "PRAGMA temp_store=MEMORY",
)
_HINT = "write only the contract's tables, as in sandbox_image.contract.SNAPSHOT_SCHEMA_SQL"


class Budget:
    """CPU time the reading thread may still use; SQLite's progress handler asks it."""

    def __init__(self, cpu_s: float) -> None:
        self.cpu_s = cpu_s
        self._deadline = time.thread_time() + cpu_s

    @property
    def exceeded(self) -> bool:
        return time.thread_time() > self._deadline

    def progress(self) -> int:
        """Non-zero aborts the running statement (SQLite's progress-handler protocol)."""
        return 1 if self.exceeded else 0


@contextmanager
def open_under_budget(path: str, cpu_s: float = CPU_BUDGET_S) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the file at `path`, limited as the module says.

    Raises SnapshotRejected when the file cannot be opened or reading it passes the budget.
    """
    budget = Budget(cpu_s)
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, timeout=1)
    except sqlite3.Error as e:
        raise SnapshotRejected(f"snapshot cannot be opened: {e}") from e
    try:
        for limit, value in _LIMITS.items():
            conn.setlimit(limit, value)
        conn.set_progress_handler(budget.progress, PROGRESS_EVERY)
        for pragma in _PRAGMAS:
            conn.execute(pragma)
        yield conn
    except sqlite3.Error as e:
        if budget.exceeded:
            raise SnapshotRejected(
                f"reading the snapshot took more than its {cpu_s:g} s CPU budget",
                hint="keep snapshots to the contract's tables and modest row counts",
            ) from e
        raise
    finally:
        conn.close()


def check_schema(conn: sqlite3.Connection, contract: Mapping[str, Mapping[str, str]]) -> None:
    """Reject the file unless every object in its schema is allowed (see the module)."""
    objects = conn.execute("SELECT type, name, tbl_name, sql FROM main.sqlite_schema").fetchall()
    for kind, name, table, sql in objects:
        if kind in ("view", "trigger"):
            raise SnapshotRejected(
                f"snapshot holds a {kind} `{name:.60}`; a snapshot may hold plain tables only",
                hint=f"drop views and triggers; {_HINT}",
            )
        if kind == "index":
            _check_index(conn, name, table, sql, contract)
        elif kind == "table":
            _check_table(conn, name, sql or "", contract.get(name))


def _check_index(
    conn: sqlite3.Connection,
    name: str,
    table: str,
    sql: str | None,
    contract: Mapping[str, Mapping[str, str]],
) -> None:
    if sql is None:  # the automatic index of a PRIMARY KEY or UNIQUE constraint
        return
    if table in contract:
        raise SnapshotRejected(
            f"snapshot has an index `{name:.60}` on the contract table `{table}`",
            hint=f"do not index the contract tables; {_HINT}",
        )
    columns = conn.execute("SELECT cid FROM pragma_index_xinfo(?)", (name,)).fetchall()
    if any(cid == -2 for (cid,) in columns):
        raise SnapshotRejected(
            f"snapshot has an expression index `{name:.60}`",
            hint="index plain columns only, or no index at all",
        )


def _check_table(
    conn: sqlite3.Connection, name: str, sql: str, types: Mapping[str, str] | None
) -> None:
    if sql.lstrip().upper().startswith("CREATE VIRTUAL"):
        raise SnapshotRejected(
            f"snapshot holds a virtual table `{name:.60}`", hint=f"use plain tables; {_HINT}"
        )
    columns = conn.execute(
        "SELECT name, type, hidden FROM pragma_table_xinfo(?)", (name,)
    ).fetchall()
    generated = [column for column, _, hidden in columns if hidden in (2, 3)]
    if generated:
        raise SnapshotRejected(
            f"snapshot's `{name:.60}` table has a generated column `{generated[0]:.60}`",
            hint=f"store plain values; {_HINT}",
        )
    if types is None:  # another table: allowed, never read
        return
    if re.search(r"\bCHECK\b", _unquoted(sql), re.IGNORECASE):
        raise SnapshotRejected(
            f"snapshot's `{name}` table has a CHECK constraint", hint=f"drop it; {_HINT}"
        )
    declared = {column: decl for column, decl, _ in columns}
    for column, expected in types.items():
        if column in declared and not _fits(declared[column], expected):
            raise SnapshotRejected(
                f"snapshot's `{name}.{column}` is declared {declared[column]!r:.40}, "
                f"not {expected}",
                hint=_HINT,
            )


def _fits(declared: str, expected: str) -> bool:
    """The declared type has the contract type's affinity (or none: values are checked)."""
    affinity = type_affinity(declared)
    if affinity == "BLOB":  # an untyped column: every value is type-checked when read
        return True
    if expected == "TEXT":
        return affinity == "TEXT"
    return affinity in (expected, "NUMERIC", "INTEGER" if expected == "REAL" else expected)


def type_affinity(declared: str) -> str:
    """SQLite's column affinity of a declared type (section 3.1 of its datatype rules)."""
    upper = declared.upper()
    if "INT" in upper:
        return "INTEGER"
    if any(word in upper for word in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if not upper or "BLOB" in upper:
        return "BLOB"
    if any(word in upper for word in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


_QUOTED = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`(?:[^`]|``)*`|\[[^\]]*\]|--[^\n]*|/\*.*?(?:\*/|$)",
    re.DOTALL,
)


def _unquoted(sql: str) -> str:
    """`sql` with its string literals, quoted names and comments blanked out."""
    return _QUOTED.sub(" ", sql)
