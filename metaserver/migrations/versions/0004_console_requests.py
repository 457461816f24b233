"""Console topic and consumer-group requests.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ms_console_requests",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("app_id", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("partitions", sa.Integer()),
        sa.Column("retention_ms", sa.BigInteger()),
        sa.Column("expected_rate", sa.Float()),
        sa.Column("note", sa.String(500), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("cluster", sa.String(255)),
        sa.Column("requested_by", sa.String(64), nullable=False),
        sa.Column("decided_by", sa.String(64)),
        sa.Column("reason", sa.String(1000)),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("decided_at", sa.Float()),
    )
    op.create_index("ix_ms_console_requests_status", "ms_console_requests", ["status"])


def downgrade() -> None:
    op.drop_index("ix_ms_console_requests_status", table_name="ms_console_requests")
    op.drop_table("ms_console_requests")
