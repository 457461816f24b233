"""Topic placements: which cluster holds each topic (users name topics, the platform picks the cluster).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ms_topic_placements",
        sa.Column("topic", sa.String(255), primary_key=True),
        sa.Column("cluster", sa.String(200), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("updated_by", sa.String(64), nullable=False),
    )
    op.create_index("ix_ms_topic_placements_cluster", "ms_topic_placements", ["cluster"])


def downgrade() -> None:
    op.drop_index("ix_ms_topic_placements_cluster", "ms_topic_placements")
    op.drop_table("ms_topic_placements")
