"""Per-app access keys scoped to the namespaces that app may read (issue 37): ``access_keys.owner`` (the ykafka
app the MetaServer issued the key to) and ``access_keys.scope`` (what it may read, JSON); both NULL on Apollo's
own whole-app keys.

Revision ID: cc0002
Revises: cc0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "cc0002"
down_revision = "cc0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("access_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("scope", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("access_keys", schema=None) as batch_op:
        batch_op.drop_column("scope")
        batch_op.drop_column("owner")
