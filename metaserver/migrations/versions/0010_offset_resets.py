"""Consumer-group offset resets with their plan and steps (the console's live panel, any peer).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ms_offset_resets",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("group_id", sa.String(255), nullable=False),
        sa.Column("cluster", sa.String(200), nullable=False),
        sa.Column("operator", sa.String(255), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_ms_offset_resets_group", "ms_offset_resets", ["group_id"])


def downgrade() -> None:
    op.drop_index("ix_ms_offset_resets_group", "ms_offset_resets")
    op.drop_table("ms_offset_resets")
