"""``ms_console_summaries``: the console's summaries over every live client, shared between the MetaServers of a
deployment. Each MetaServer's warmer scanned every summary itself every 20 s: at 100,000 clients about a second
of PostgreSQL a round per MetaServer, so N MetaServers (the sizing table asks for ~21 at that size) paid it N
times over for the same counts. A warmer now takes a summary another one read lately from this table
(docs/deployment.md).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ms_console_summaries",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("read_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ms_console_summaries")
