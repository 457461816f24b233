"""Each app's own config-center access key (issue 37): ``ms_configcenter_keys`` (sealed secret, the key generation
it was minted for, the scope last pushed to the config service).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ms_configcenter_keys",
        sa.Column("app_id", sa.String(128), primary_key=True),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("key_generation", sa.Integer(), nullable=False),
        sa.Column("scope", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ms_configcenter_keys")
