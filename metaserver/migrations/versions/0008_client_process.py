"""Client reports name the process holding the client (its start time, beside hostname and pid): a process's
Producers and Consumers each report under their own id and the console groups them by process.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("ms_client_state", "ms_client_reports"):
        op.add_column(table, sa.Column("process_started", sa.Float(), nullable=True))


def downgrade() -> None:
    for table in ("ms_client_state", "ms_client_reports"):
        op.drop_column(table, "process_started")
