"""sessions_ledger: the dashboard's server-side sessions (random, expiring, revocable)

Revision ID: 0017_sessions_ledger
Revises: 0014_stages_ledger
"""

import sqlalchemy as sa
from alembic import op

revision = "0017_sessions_ledger"
# The chain's head on this branch (0015_scale is followed by 0013_items and
# 0014_stages_ledger here): a single head, as `upgrade head` needs.
down_revision = "0014_stages_ledger"
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
