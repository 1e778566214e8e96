"""The wire contract between the controller and every sandbox, defined once.

Environment variable names, event types, the event endpoint path, sandbox id
rules and the snapshot schema. The controller imports these; any sandbox image
(ours or a user's) follows them. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

ENV_SANDBOX_ID = "SIMPLE_SANDBOX_ID"
ENV_RUN_ID = "SIMPLE_RUN_ID"
ENV_TEMPLATE_ID = "SIMPLE_TEMPLATE_ID"
ENV_ATTEMPT = "SIMPLE_ATTEMPT"
ENV_TEMPLATE_CONFIG = "SIMPLE_TEMPLATE_CONFIG"
ENV_SEED = "SIMPLE_SEED"
ENV_CONTROLLER_URL = "SIMPLE_CONTROLLER_URL"
ENV_SANDBOX_TOKEN = "SIMPLE_SANDBOX_TOKEN"
ENV_SNAPSHOT_URL = "SIMPLE_SNAPSHOT_URL"
# Optional (wave 2): present only when they apply.
ENV_ITEMS_URL = "SIMPLE_ITEMS_URL"
ENV_RESUME_URL = "SIMPLE_RESUME_URL"
ENV_INPUT_URL = "SIMPLE_INPUT_URL"  # staged runs: the previous stage's rows

# The variables that grant access (the token, the signed or presigned URLs). A backend may
# hand them over as files instead: one file per variable, named as it, in the directory
# SIMPLE_SECRETS_DIR names (Kubernetes: the sandbox's own Secret, mounted read-only).
CREDENTIAL_NAMES: tuple[str, ...] = (
    ENV_SANDBOX_TOKEN,
    ENV_SNAPSHOT_URL,
    ENV_ITEMS_URL,
    ENV_RESUME_URL,
    ENV_INPUT_URL,
)
ENV_SECRETS_DIR = "SIMPLE_SECRETS_DIR"
# The template's own secrets (its catalog entry's `secrets`), one file per name it is
# handed over as, where the backend mounts them (Kubernetes); the runtime exports them.
ENV_TEMPLATE_SECRETS_DIR = "SIMPLE_TEMPLATE_SECRETS_DIR"
MAX_CREDENTIAL_BYTES = 64 * 1024

ENV_NAMES: tuple[str, ...] = (
    ENV_SANDBOX_ID,
    ENV_RUN_ID,
    ENV_TEMPLATE_ID,
    ENV_ATTEMPT,
    ENV_TEMPLATE_CONFIG,
    ENV_SEED,
    ENV_CONTROLLER_URL,
    ENV_SANDBOX_TOKEN,
    ENV_SNAPSHOT_URL,
)

SANDBOX_ID_MAX_LENGTH = 63
TEMPLATE_SECRET_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
SANDBOX_ID_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

EVENTS_PATH = "/v1/sandboxes/{sandbox_id}/events"


class EventType(StrEnum):
    """What a sandbox event says; `completed` and `failed` are terminal."""

    STARTED = "started"
    PROGRESS = "progress"
    ERROR = "error"
    COMPLETED = "completed"
    FAILED = "failed"


TERMINAL_EVENT_TYPES = frozenset({EventType.COMPLETED, EventType.FAILED})

# Labels stamped on everything a backend creates, so it can be found again.
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_MANAGED_BY_VALUE = "simple"
LABEL_RUN_ID = "simple.dev/run-id"
LABEL_SANDBOX_ID = "simple.dev/sandbox-id"
LABEL_TEMPLATE_ID = "simple.dev/template-id"
LABEL_ATTEMPT = "simple.dev/attempt"
# Which controller (which database) launched it, so controllers sharing a Docker engine
# or a namespace leave each other's sandboxes alone.
LABEL_CONTROLLER = "simple.dev/controller"

# The snapshot's contract tables and the SQLite type each column is declared with. The
# controller reads these columns and nothing else; its allowlist of schema objects and
# declared types is built from this map (add a table or column here to extend it).
SNAPSHOT_COLUMN_TYPES: dict[str, dict[str, str]] = {
    "runs": {
        "run_id": "TEXT",
        "template_id": "TEXT",
        "status": "TEXT",
        "started_at": "TEXT",
        "finished_at": "TEXT",
        "cost_usd": "REAL",
        "tokens_used": "INTEGER",
        "llm_calls": "INTEGER",
        "entities_created": "INTEGER",
        "timepoints_created": "INTEGER",
        "mechanisms_used": "TEXT",
    },
    "steps": {
        "run_id": "TEXT",
        "step": "INTEGER",
        "duration_ms": "INTEGER",
        "actions": "INTEGER",
        "failures": "INTEGER",
        "cost_usd": "REAL",
        "tokens": "INTEGER",
    },
    # Batch templates only: one row per item; optional in a snapshot.
    "items": {
        "item_id": "TEXT",
        "status": "TEXT",
        "passed": "INTEGER",
        "reason": "TEXT",
        "error": "TEXT",
        "duration_ms": "INTEGER",
        "data": "TEXT",
    },
}

SNAPSHOT_TABLES: dict[str, tuple[str, ...]] = {
    table: tuple(columns) for table, columns in SNAPSHOT_COLUMN_TYPES.items()
}
OPTIONAL_SNAPSHOT_TABLES = frozenset({"items"})
ITEM_STATUSES = ("succeeded", "failed", "skipped")

SNAPSHOT_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, template_id TEXT NOT NULL,
  status TEXT NOT NULL, started_at TEXT, finished_at TEXT,
  cost_usd REAL, tokens_used INTEGER, llm_calls INTEGER,
  entities_created INTEGER, timepoints_created INTEGER,
  mechanisms_used TEXT);
CREATE TABLE IF NOT EXISTS steps (run_id TEXT NOT NULL, step INTEGER NOT NULL,
  duration_ms INTEGER, actions INTEGER, failures INTEGER,
  cost_usd REAL, tokens INTEGER, PRIMARY KEY (run_id, step));
CREATE TABLE IF NOT EXISTS items (item_id TEXT PRIMARY KEY, status TEXT NOT NULL,
  passed INTEGER, reason TEXT, error TEXT, duration_ms INTEGER, data TEXT);
"""


class ContractError(ValueError):
    """The sandbox's environment does not follow the contract."""


@dataclass(frozen=True)
class SandboxEnv:
    """The contract's environment variables, parsed and checked."""

    sandbox_id: str
    run_id: str
    template_id: str
    attempt: int
    template_config: dict[str, Any]
    seed: int
    controller_url: str
    sandbox_token: str
    snapshot_url: str
    items_url: str | None = None
    resume_url: str | None = None
    input_url: str | None = None  # GET: the previous stage's rows (SQLite), staged runs only

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> SandboxEnv:
        """Read the contract from `environ` (default: the process environment), and the
        credentials it lacks from the files in SIMPLE_SECRETS_DIR, when it names one."""
        env = with_credential_files(os.environ if environ is None else environ)
        missing = [name for name in ENV_NAMES if not env.get(name)]
        if missing:
            raise ContractError(
                f"missing environment variables: {', '.join(missing)}; "
                "a sandbox must be started by a SIMPLE backend"
            )
        sandbox_id = env[ENV_SANDBOX_ID]
        if not SANDBOX_ID_PATTERN.match(sandbox_id):
            raise ContractError(f"{ENV_SANDBOX_ID}={sandbox_id!r} is not a valid sandbox id")
        try:
            config = json.loads(env[ENV_TEMPLATE_CONFIG])
        except json.JSONDecodeError as e:
            raise ContractError(f"{ENV_TEMPLATE_CONFIG} is not JSON: {e}") from e
        if not isinstance(config, dict):
            raise ContractError(f"{ENV_TEMPLATE_CONFIG} must be a JSON object")
        return cls(
            sandbox_id=sandbox_id,
            run_id=env[ENV_RUN_ID],
            template_id=env[ENV_TEMPLATE_ID],
            attempt=_as_int(env, ENV_ATTEMPT),
            template_config=config,
            seed=_as_int(env, ENV_SEED),
            controller_url=env[ENV_CONTROLLER_URL].rstrip("/"),
            sandbox_token=env[ENV_SANDBOX_TOKEN],
            snapshot_url=env[ENV_SNAPSHOT_URL],
            items_url=env.get(ENV_ITEMS_URL) or None,
            resume_url=env.get(ENV_RESUME_URL) or None,
            input_url=env.get(ENV_INPUT_URL) or None,
        )

    def to_environ(self) -> dict[str, str]:
        """The variables a backend injects into the sandbox."""
        optional = {
            ENV_ITEMS_URL: self.items_url,
            ENV_RESUME_URL: self.resume_url,
            ENV_INPUT_URL: self.input_url,
        }
        return {
            **{name: value for name, value in optional.items() if value},
            ENV_SANDBOX_ID: self.sandbox_id,
            ENV_RUN_ID: self.run_id,
            ENV_TEMPLATE_ID: self.template_id,
            ENV_ATTEMPT: str(self.attempt),
            ENV_TEMPLATE_CONFIG: json.dumps(self.template_config, sort_keys=True),
            ENV_SEED: str(self.seed),
            ENV_CONTROLLER_URL: self.controller_url,
            ENV_SANDBOX_TOKEN: self.sandbox_token,
            ENV_SNAPSHOT_URL: self.snapshot_url,
        }

    @property
    def events_url(self) -> str:
        """Where this sandbox POSTs its events."""
        return self.controller_url + EVENTS_PATH.format(sandbox_id=self.sandbox_id)


def _as_int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError as e:
        raise ContractError(f"{name}={env[name]!r} is not an integer") from e


def with_credential_files(environ: Mapping[str, str]) -> Mapping[str, str]:
    """`environ` plus each credential it lacks read from SIMPLE_SECRETS_DIR/<NAME> (a
    trailing newline dropped); a missing file means the credential does not apply."""
    directory = environ.get(ENV_SECRETS_DIR)
    if not directory:
        return environ
    merged = dict(environ)
    for name in CREDENTIAL_NAMES:
        if merged.get(name):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_CREDENTIAL_BYTES + 1)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise ContractError(f"cannot read {path} ({ENV_SECRETS_DIR}): {e}") from e
        if len(data) > MAX_CREDENTIAL_BYTES:
            raise ContractError(f"{path} is over {MAX_CREDENTIAL_BYTES} bytes")
        merged[name] = data.decode("utf-8", "replace").rstrip("\n")
    return merged


def export_template_secrets(environ: MutableMapping[str, str]) -> list[str]:
    """Each file in SIMPLE_TEMPLATE_SECRETS_DIR (a name [A-Z_][A-Z0-9_]*) set in `environ`
    under its name unless already set; the names exported."""
    directory = environ.get(ENV_TEMPLATE_SECRETS_DIR)
    if not directory or not os.path.isdir(directory):
        return []
    exported = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not TEMPLATE_SECRET_NAME.match(name) or name in environ or not os.path.isfile(path):
            continue
        with open(path, "rb") as handle:
            data = handle.read(MAX_CREDENTIAL_BYTES + 1)
        if len(data) > MAX_CREDENTIAL_BYTES:
            raise ContractError(f"{path} is over {MAX_CREDENTIAL_BYTES} bytes")
        environ[name] = data.decode("utf-8", "replace").rstrip("\n")
        exported.append(name)
    return exported
