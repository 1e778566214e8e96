"""stages, the ledger, observed estimates and cost alerts

Revision ID: 0014_stages_ledger
Revises: 0013_items
Create Date: 2026-11-23 14:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0014_stages_ledger"
down_revision = "0013_items"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stage", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(
            sa.Column("confirm_over", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(sa.Column("hold_reason", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("alerts", sa.JSON(), nullable=True))
    with op.batch_alter_table("sandboxes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stage", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(
            sa.Column("cost_alerted", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tokens", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("snapshot_sha256", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("snapshot_bytes", sa.BigInteger(), nullable=True))
    op.create_table(
        "ledger",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=63), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("sandbox_id", sa.String(length=63), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("entry_hash", sa.String(length=64), nullable=False),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "seq", name="uq_ledger_run_seq"),
        sa.UniqueConstraint("sandbox_id", "attempt", name="uq_ledger_sandbox_attempt"),
    )
    op.create_table(
        "observations",
        sa.Column("sandbox_id", sa.String(length=63), nullable=False),
        sa.Column("run_id", sa.String(length=63), nullable=False),
        sa.Column("template_id", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("runtime_s", sa.Float(), nullable=True),
        sa.Column("estimate_cost_min_usd", sa.Float(), nullable=True),
        sa.Column("estimate_cost_max_usd", sa.Float(), nullable=True),
        sa.Column("estimate_runtime_min_s", sa.Float(), nullable=True),
        sa.Column("estimate_runtime_max_s", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sandbox_id"),
    )
    op.create_index(
        "ix_observations_template_finished", "observations", ["template_id", "finished_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_observations_template_finished", table_name="observations")
    op.drop_table("observations")
    op.drop_table("ledger")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_column("snapshot_bytes")
        batch_op.drop_column("snapshot_sha256")
        batch_op.drop_column("tokens")
    with op.batch_alter_table("sandboxes", schema=None) as batch_op:
        batch_op.drop_column("cost_alerted")
        batch_op.drop_column("stage")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("alerts")
        batch_op.drop_column("hold_reason")
        batch_op.drop_column("confirm_over")
        batch_op.drop_column("stage")
