"""PostgreSQL: a GIN index on ``ms_client_state.topics::jsonb``, so "the clients of topic T" (the topic page,
the clients page's topic filter, the topics page's counts) is an index lookup, not a scan of every client's
JSON (190-290 ms per request at 100,000 clients, 1-20 ms with it: bench/control_plane_scale.py). SQLite keeps
its LIKE (metaserver/console/queries.py).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE INDEX ix_ms_client_state_topics ON ms_client_state USING gin ((topics::jsonb)) "
                   "WITH (fastupdate = off)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX ix_ms_client_state_topics")
