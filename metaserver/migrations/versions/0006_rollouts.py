"""Guarded rollouts: guard rules edited in the console, rollout plans, the plan drivers' lease.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ms_guard_rules",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("updated_by", sa.String(255), nullable=False),
    )
    op.create_table(
        "ms_rollout_plans",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("scope", sa.String(300), nullable=False),
        sa.Column("namespace", sa.String(300), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("step_started", sa.Float(), nullable=True),
        sa.Column("canary", sa.JSON(), nullable=True),
        sa.Column("decisions", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_ms_rollout_plans_state", "ms_rollout_plans", ["state"])
    op.create_table(
        "ms_rollout_lease",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(128), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ms_rollout_lease")
    op.drop_index("ix_ms_rollout_plans_state", "ms_rollout_plans")
    op.drop_table("ms_rollout_plans")
    op.drop_table("ms_guard_rules")
