"""rerun and retention: runs.rerun_of and runs.purged_at; the maintenance table

Revision ID: 0018_rerun_retention
Revises: 0017_sessions
"""

import sqlalchemy as sa
from alembic import op

revision = "0018_rerun_retention"
down_revision = "0017_sessions"
# Code from before this migration runs on the schema it leaves: it adds nullable columns,
# an index and a table.
additive = True
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("rerun_of", sa.String(length=63), nullable=True))
        batch_op.add_column(sa.Column("purged_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index("ix_runs_finished_at", ["finished_at"], unique=False)
    op.create_table(
        "maintenance",
        sa.Column("task", sa.String(length=40), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("task"),
    )


def downgrade() -> None:
    op.drop_table("maintenance")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_finished_at")
        batch_op.drop_column("purged_at")
        batch_op.drop_column("rerun_of")
