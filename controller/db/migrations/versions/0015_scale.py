"""scale: indexes for the reconciler's and the API's queries; when an attempt's end was committed

Revision ID: 0015_scale
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0015_scale"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_status", ["status"], unique=False)
        batch_op.create_index("ix_runs_created_at", ["created_at"], unique=False)
    with op.batch_alter_table("sandboxes", schema=None) as batch_op:
        batch_op.create_index("ix_sandboxes_run_id_position", ["run_id", "position"], unique=False)
        batch_op.create_index("ix_sandboxes_status_run_id", ["status", "run_id"], unique=False)
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_column("recorded_at")
    with op.batch_alter_table("sandboxes", schema=None) as batch_op:
        batch_op.drop_index("ix_sandboxes_status_run_id")
        batch_op.drop_index("ix_sandboxes_run_id_position")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_created_at")
        batch_op.drop_index("ix_runs_status")
