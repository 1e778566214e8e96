"""items: per-item results of batch sandboxes; resume details on attempts

Revision ID: 0013_items
Revises: 0015_scale
"""

import sqlalchemy as sa
from alembic import op

revision = "0013_items"
down_revision = "0015_scale"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "result_items",
        sa.Column("sandbox_id", sa.String(length=63), nullable=False),
        sa.Column("item_id", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.String(length=63), nullable=False),
        sa.Column("template_id", sa.String(length=100), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("passed", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("data", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("sandbox_id", "item_id"),
    )
    op.create_index("ix_result_items_run_id", "result_items", ["run_id"])
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("resumed_from_step", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("resume_note", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("resume_note")
        batch.drop_column("resumed_from_step")
    op.drop_index("ix_result_items_run_id", table_name="result_items")
    op.drop_table("result_items")
