"""Tables of the controller's database, in SQLAlchemy Core.

Alembic migrations (`controller/db/migrations`) create these; the app never calls
`create_all`. Times are timezone-aware UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect

metadata = MetaData()


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every database (SQLite returns naive ones)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to the database; use UTC-aware ones")
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


# SQLite only autoincrements INTEGER PRIMARY KEY; PostgreSQL gets a bigint identity.
AutoId = BigInteger().with_variant(Integer, "sqlite")

runs = Table(
    "runs",
    metadata,
    Column("id", String(63), primary_key=True),
    Column("status", String(20), nullable=False),
    Column("backend", String(20), nullable=False),
    Column("request", JSON, nullable=False),
    Column("plan", JSON, nullable=False),
    Column("budget_usd", Float),
    Column("max_parallel", Integer, nullable=False),
    Column("idempotency_key", String(200), unique=True),
    Column("request_hash", String(64)),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("error", Text),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("started_at", UTCDateTime()),
    Column("finished_at", UTCDateTime()),
    Column("stage", Integer, nullable=False, default=0),  # the stage now launching (staged runs)
    Column("confirm_over", Boolean, nullable=False, default=False),  # hold on a cost alert
    Column("hold_reason", Text),  # set while launching waits for a confirmation
    Column("alerts", JSON),  # cost alerts raised, oldest first
    # 0018: the run this one reruns (its failed sandboxes, or all of them)
    Column("rerun_of", String(63)),
    # 0018: when retention removed its logs, item files, resume copies, inputs and events
    Column("purged_at", UTCDateTime()),
    # 0019: {key: value} the run was started with (commit, ref, pipeline …)
    Column("labels", JSON),
    Index("ix_runs_status", "status"),
    Index("ix_runs_created_at", "created_at"),
    Index("ix_runs_finished_at", "finished_at"),
)

sandboxes = Table(
    "sandboxes",
    metadata,
    Column("id", String(63), primary_key=True),
    Column("run_id", String(63), ForeignKey("runs.id"), nullable=False, index=True),
    Column("template_id", String(100), nullable=False),
    Column("position", Integer, nullable=False),
    Column("status", String(20), nullable=False),
    Column("spec", JSON, nullable=False),  # image, command, config, timeout_s, resources, seed
    Column("attempt", Integer, nullable=False, default=0),
    Column("token_hash", String(64), index=True),
    Column("stop_reason", String(20)),  # why the controller stopped it: timeout, cancelled, budget
    Column("exit_code", Integer),
    Column("error", Text),
    Column("transient", Boolean),  # from the last `failed` event
    Column("next_attempt_at", UTCDateTime()),
    Column("launched_at", UTCDateTime()),
    Column("started_at", UTCDateTime()),
    Column("finished_at", UTCDateTime()),
    Column("last_seq", Integer, nullable=False, default=0),
    Column("step", Integer),
    Column("steps_total", Integer),
    Column("cost_usd", Float, nullable=False, default=0.0),  # live, this attempt's progress
    Column("prior_cost_usd", Float, nullable=False, default=0.0),  # earlier attempts' cost
    Column("expensive", Boolean, nullable=False, default=False),
    Column("tokens", Integer, nullable=False, default=0),
    Column("aggregated", Boolean, nullable=False, default=False),
    Column("log_key", String(300)),
    Column("log_dropped_bytes", BigInteger),  # output the log budget dropped (archived log)
    Column("stage", Integer, nullable=False, default=0),  # 0-based stage of a staged run
    Column("cost_alerted", Boolean, nullable=False, default=False),
    Index("ix_sandboxes_run_id_position", "run_id", "position"),
    Index("ix_sandboxes_status_run_id", "status", "run_id"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("sandbox_id", String(63), ForeignKey("sandboxes.id"), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("status", String(20), nullable=False),
    Column("exit_code", Integer),
    Column("error", Text),
    Column("cost_usd", Float),
    Column("tokens", BigInteger),
    Column("snapshot_sha256", String(64)),  # of the snapshot object as it was fetched
    Column("snapshot_bytes", BigInteger),
    Column("started_at", UTCDateTime()),
    Column("exited_at", UTCDateTime()),  # when the backend saw it end
    Column("finished_at", UTCDateTime()),  # when the controller began recording its end
    Column("recorded_at", UTCDateTime()),  # when its end and snapshot rows were committed
    # Resume (0013): the checkpoint step this attempt was given, and why none was.
    Column("resumed_from_step", Integer),
    Column("resume_note", Text),
    # Event quotas shared by API replicas (0021): what this attempt has posted so far.
    Column("events_posted", BigInteger, nullable=False, server_default="0"),
    Column("event_bytes_posted", BigInteger, nullable=False, server_default="0"),
)

events = Table(
    "events",
    metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("sandbox_id", String(63), nullable=False),
    Column("run_id", String(63), nullable=False),
    Column("event_id", String(100), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("type", String(20), nullable=False),
    Column("time", UTCDateTime(), nullable=False),
    Column("data", JSON, nullable=False),
    Column("body_hash", String(64), nullable=False),
    Column("received_at", UTCDateTime(), nullable=False),
    UniqueConstraint("sandbox_id", "event_id", name="uq_events_sandbox_event"),
    Index("ix_events_run_id_id", "run_id", "id"),
)

result_runs = Table(
    "result_runs",
    metadata,
    Column("sandbox_id", String(63), primary_key=True),
    Column("snapshot_run_id", String(200), primary_key=True),
    Column("run_id", String(63), nullable=False, index=True),
    Column("template_id", String(100), nullable=False),
    Column("status", String(20), nullable=False),
    Column("started_at", Text),
    Column("finished_at", Text),
    Column("cost_usd", Float),
    Column("tokens_used", BigInteger),
    Column("llm_calls", BigInteger),
    Column("entities_created", BigInteger),
    Column("timepoints_created", BigInteger),
    Column("mechanisms_used", Text),
)

result_steps = Table(
    "result_steps",
    metadata,
    Column("sandbox_id", String(63), primary_key=True),
    Column("snapshot_run_id", String(200), primary_key=True),
    Column("step", Integer, primary_key=True),
    Column("run_id", String(63), nullable=False, index=True),
    Column("duration_ms", BigInteger),
    Column("actions", BigInteger),
    Column("failures", BigInteger),
    Column("cost_usd", Float),
    Column("tokens", BigInteger),
)

# A tamper-evident record per run: one entry per ended attempt, each hashing the one before.
ledger = Table(
    "ledger",
    metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("run_id", String(63), ForeignKey("runs.id"), nullable=False),
    Column("seq", Integer, nullable=False),  # 1, 2, … per run
    Column("sandbox_id", String(63), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("entry_hash", String(64), nullable=False),
    Column("record", JSON, nullable=False),  # what was hashed, to say which field changed
    Column("created_at", UTCDateTime(), nullable=False),
    # Two sandboxes ending at once cannot both take the next seq: the chain cannot fork.
    UniqueConstraint("run_id", "seq", name="uq_ledger_run_seq"),
    UniqueConstraint("sandbox_id", "attempt", name="uq_ledger_sandbox_attempt"),
)

# What each ended sandbox really cost and took, next to the estimate it was planned with.
observations = Table(
    "observations",
    metadata,
    Column("sandbox_id", String(63), primary_key=True),
    Column("run_id", String(63), nullable=False),
    Column("template_id", String(100), nullable=False),
    Column("status", String(20), nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("runtime_s", Float),
    Column("estimate_cost_min_usd", Float),
    Column("estimate_cost_max_usd", Float),
    Column("estimate_runtime_min_s", Float),
    Column("estimate_runtime_max_s", Float),
    Column("finished_at", UTCDateTime(), nullable=False),
    Index("ix_observations_template_finished", "template_id", "finished_at"),
)

# Batch templates (0013): one row per item of a sandbox's accepted snapshot.
result_items = Table(
    "result_items",
    metadata,
    Column("sandbox_id", String(63), primary_key=True),
    Column("item_id", String(200), primary_key=True),
    Column("run_id", String(63), nullable=False, index=True),
    Column("template_id", String(100), nullable=False),
    Column("status", String(20), nullable=False),
    Column("passed", Integer),
    Column("reason", Text),
    Column("error", Text),
    Column("duration_ms", BigInteger),
    Column("data", Text),
)

# Which controllers can run on this schema: written by `upgrade` (one row). A controller
# older than the schema (after a rollback) is ready if its own head is at or after
# `readable_from`: every migration since then only added (tables, nullable columns,
# indexes). See controller/db/revisions.py and docs/storage.md#rollbacks.
schema_compat = Table(
    "schema_compat",
    metadata,
    Column("revision", String(64), primary_key=True),
    Column("readable_from", String(64), nullable=False),
    Column("written_at", UTCDateTime(), nullable=False),
)

# The dashboard's sessions (0017): the cookie holds a random value; only its SHA-256 is
# kept, with the digest of the API token it logged in with (a token removed from
# SIMPLE_API_TOKENS ends its sessions), an expiry, and the logout that revoked it.
sessions = Table(
    "sessions",
    metadata,
    Column("id", String(64), primary_key=True),  # sha256 of the cookie's value
    Column("token_sha256", String(64), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False, index=True),
    Column("revoked_at", UTCDateTime()),
)

# Periodic chores (0018): when each last started, so a restart does not run one early.
maintenance = Table(
    "maintenance",
    metadata,
    Column("task", String(40), primary_key=True),  # e.g. "gc"
    Column("started_at", UTCDateTime(), nullable=False),
    Column("finished_at", UTCDateTime()),
    Column("result", JSON),  # what the last completed one did
)

# The reconcilers' leader lease (0021): `epoch` grows by one at every change of holder, and
# every write a leader makes checks it in its own transaction (controller.leader.fence).
leases = Table(
    "leases",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("holder", String(200), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("renewed_at", UTCDateTime(), nullable=False),
    Column("acquired_at", UTCDateTime(), nullable=False),
)

# The principal's conversations (0021), so that any API replica can carry one on.
conversations = Table(
    "conversations",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("owner", String(128), nullable=False),
    Column("state", JSON, nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    Index("ix_conversations_updated_at", "updated_at"),
)
