"""schema_compat: which controllers can run on this schema (rollbacks past a migration)

Revision ID: 0016_schema_compat
Revises: 0014_stages_ledger
"""

import sqlalchemy as sa
from alembic import op

revision = "0016_schema_compat"
down_revision = "0014_stages_ledger"
branch_labels = None
depends_on = None
# Code from before this migration runs on the schema it leaves: it only adds a table.
additive = True


def upgrade() -> None:
    op.create_table(
        "schema_compat",
        sa.Column("revision", sa.String(length=64), nullable=False),
        sa.Column("readable_from", sa.String(length=64), nullable=False),
        sa.Column("written_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("revision"),
    )


def downgrade() -> None:
    op.drop_table("schema_compat")
