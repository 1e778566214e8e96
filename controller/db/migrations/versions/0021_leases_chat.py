"""leases_chat: the reconcilers' leader lease, per-attempt event counters shared by API
replicas, and the principal's conversations

Revision ID: 0021_leases_chat
Revises: 0020_log_budget
"""

import sqlalchemy as sa
from alembic import op

revision = "0021_leases_chat"
down_revision = "0020_log_budget"
# Code from before this migration runs on the schema it leaves: it adds tables, and columns
# with a server default.
additive = True
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("renewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("events_posted", sa.BigInteger(), nullable=False, server_default="0"))
        batch_op.add_column(
            sa.Column("event_bytes_posted", sa.BigInteger(), nullable=False, server_default="0"))
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_conversations_updated_at", "conversations", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_conversations_updated_at", table_name="conversations")
    op.drop_table("conversations")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_column("event_bytes_posted")
        batch_op.drop_column("events_posted")
    op.drop_table("leases")
