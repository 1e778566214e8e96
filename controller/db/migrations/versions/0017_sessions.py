"""sessions: the dashboard's server-side sessions (random, expiring, revocable)

Revision ID: 0017_sessions
Revises: 0016_schema_compat
"""

import sqlalchemy as sa
from alembic import op

revision = "0017_sessions"
down_revision = "0016_schema_compat"
# Code from before this migration runs on the schema it leaves: it only adds a table.
additive = True
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(length=64), primary_key=True),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_sessions_expires_at", "sessions", ["expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_sessions_expires_at", table_name="sessions")
    op.drop_table("sessions")
