"""The gather step of a staged run: read SIMPLE_INPUT_URL, record what was read.

A sandbox of a later stage downloads one SQLite file holding the previous
stage's `sandboxes`, `runs` and `steps` rows. The built-in runtime reads it
before its workload starts, keeps a copy of what it read in its own snapshot
(tables `input_sandboxes` and `input_runs`, and one `verdict` row: the best
run of the previous stage by entities created per dollar), and says how many
rows it read in its `started` event. The input is untrusted like any download:
bounded in size, opened read-only from a private copy.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from dataclasses import dataclass
from typing import Any

MAX_INPUT_BYTES = 256 * 1024 * 1024

INPUT_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS input_sandboxes (sandbox_id TEXT PRIMARY KEY, template_id TEXT,
  stage INTEGER, status TEXT, exit_code INTEGER, error TEXT);
CREATE TABLE IF NOT EXISTS input_runs (sandbox_id TEXT NOT NULL, run_id TEXT NOT NULL,
  template_id TEXT, status TEXT, cost_usd REAL, tokens_used INTEGER,
  entities_created INTEGER, steps INTEGER, PRIMARY KEY (sandbox_id, run_id));
CREATE TABLE IF NOT EXISTS verdict (id INTEGER PRIMARY KEY CHECK (id = 1),
  best_sandbox_id TEXT, best_template_id TEXT, score REAL, runs_read INTEGER,
  sandboxes_read INTEGER, succeeded INTEGER);
"""


class InputError(RuntimeError):
    """The stage input could not be fetched or read."""


@dataclass(frozen=True)
class StageInput:
    """What the previous stage left: its sandboxes and their aggregated runs."""

    sandboxes: list[tuple[Any, ...]]
    runs: list[tuple[Any, ...]]

    def best(self) -> tuple[Any, ...] | None:
        """The run with most entities per dollar (the judge's pick), or None."""
        scored = [r for r in self.runs if r[3] == "completed"] or list(self.runs)
        if not scored:
            return None
        return max(scored, key=lambda r: ((r[6] or 0) / max(r[4] or 0.0, 1e-9), r[0]))


def read_input(data: bytes) -> StageInput:
    """The rows of the input file (opened read-only from a private copy)."""
    fd, path = tempfile.mkstemp(prefix="simple-input-", suffix=".sqlite")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        try:
            conn.execute("PRAGMA trusted_schema=OFF")
            sandboxes = conn.execute(
                "SELECT sandbox_id, template_id, stage, status, exit_code, error FROM sandboxes"
            ).fetchall()
            runs = conn.execute(
                "SELECT r.sandbox_id, r.run_id, r.template_id, r.status, r.cost_usd, "
                "r.tokens_used, r.entities_created, "
                "(SELECT COUNT(*) FROM steps s WHERE s.sandbox_id = r.sandbox_id "
                "AND s.run_id = r.run_id) FROM runs r ORDER BY r.sandbox_id"
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise InputError(f"stage input is not the expected SQLite file: {e}") from e
    finally:
        os.unlink(path)
    return StageInput(sandboxes=sandboxes, runs=runs)


def record_input(conn: sqlite3.Connection, stage_input: StageInput) -> None:
    """Keep what was read, and the verdict, in the sandbox's own snapshot."""
    conn.executemany("INSERT OR REPLACE INTO input_sandboxes VALUES (?, ?, ?, ?, ?, ?)",
                     stage_input.sandboxes)
    conn.executemany(
        "INSERT OR REPLACE INTO input_runs (sandbox_id, run_id, template_id, status, cost_usd, "
        "tokens_used, entities_created, steps) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        stage_input.runs,
    )
    best = stage_input.best()
    succeeded = sum(1 for s in stage_input.sandboxes if s[3] == "succeeded")
    conn.execute(
        "INSERT OR REPLACE INTO verdict VALUES (1, ?, ?, ?, ?, ?, ?)",
        (best[0] if best else None, best[2] if best else None,
         ((best[6] or 0) / max(best[4] or 0.0, 1e-9)) if best else None,
         len(stage_input.runs), len(stage_input.sandboxes), succeeded),
    )
