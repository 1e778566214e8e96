"""log budget: how many bytes of a sandbox's archived output the log budget dropped

Revision ID: 0016_log_budget
Revises: 0014_stages_ledger
"""

import sqlalchemy as sa
from alembic import op

revision = "0016_log_budget"
down_revision = "0014_stages_ledger"  # the head on this branch (0001 → 0015_scale → 0013 → 0014)
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("log_dropped_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sandboxes", schema=None) as batch_op:
        batch_op.drop_column("log_dropped_bytes")
