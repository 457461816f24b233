"""Client history pruned by age and read per client: an index on ``at`` (the retention's delete walks it in
batches) and one on (app_id, client_id, id) (a client's page reads its newest history rows without sorting
every row of its app).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_ms_client_reports_at", "ms_client_reports", ["at"])
    op.create_index("ix_ms_client_reports_client", "ms_client_reports", ["app_id", "client_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_ms_client_reports_client", "ms_client_reports")
    op.drop_index("ix_ms_client_reports_at", "ms_client_reports")
