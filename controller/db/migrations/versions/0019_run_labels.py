"""run labels: key=value pairs a run carries (its pipeline's commit, ref, URL …)

Revision ID: 0019_run_labels
Revises: 0018_rerun_retention
"""

import sqlalchemy as sa
from alembic import op

revision = "0019_run_labels"
down_revision = "0018_rerun_retention"
# Code from before this migration runs on the schema it leaves: it adds a nullable column.
additive = True
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("labels", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("labels")
