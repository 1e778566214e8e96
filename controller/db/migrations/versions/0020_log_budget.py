"""log budget: how many bytes of a sandbox's archived output the log budget dropped

Revision ID: 0020_log_budget
Revises: 0019_run_labels
"""

import sqlalchemy as sa
from alembic import op

revision = "0020_log_budget"
down_revision = "0019_run_labels"
# Code from before this migration runs on the schema it leaves: it adds a nullable column.
additive = True
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("log_dropped_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sandboxes", schema=None) as batch_op:
        batch_op.drop_column("log_dropped_bytes")
