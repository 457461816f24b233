"""Alerts received from the pipeline (``POST /v1/admin/alerts``), one row per stable alert id.

Revision ID: 0002
Revises: 0001
Create Date: 2025-06-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ms_alerts",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("level", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("topic", sa.String(255), nullable=True),
        sa.Column("group_id", sa.String(255), nullable=True),
        sa.Column("partition", sa.Integer(), nullable=True),
        sa.Column("client_id", sa.String(255), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("ts", sa.BigInteger(), nullable=False),
        sa.Column("first_seen", sa.Float(), nullable=False),
        sa.Column("last_seen", sa.Float(), nullable=False),
        sa.Column("posts", sa.Integer(), nullable=False),
        sa.Column("reported_by", sa.String(255), nullable=False),
    )
    op.create_index("ix_ms_alerts_last_seen", "ms_alerts", ["last_seen"])
    op.create_index("ix_ms_alerts_rule", "ms_alerts", ["rule"])
    op.create_index("ix_ms_alerts_topic", "ms_alerts", ["topic"])
    op.create_index("ix_ms_alerts_group", "ms_alerts", ["group_id"])


def downgrade() -> None:
    op.drop_table("ms_alerts")
