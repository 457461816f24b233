"""Initial MetaServer schema: apps, clusters, nonces, auth failures, keys, client reports, audit.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _client_columns() -> list[sa.Column]:
    return [
        sa.Column("ip", sa.String(64), nullable=True),
        sa.Column("hostname", sa.String(255), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("language", sa.String(32), nullable=True),
        sa.Column("ykafka_version", sa.String(64), nullable=True),
        sa.Column("confluent_kafka_version", sa.String(64), nullable=True),
        sa.Column("librdkafka_version", sa.String(64), nullable=True),
        sa.Column("role", sa.String(16), nullable=True),
        sa.Column("topics", sa.JSON(), nullable=True),
        sa.Column("group_id", sa.String(255), nullable=True),
        sa.Column("cluster", sa.String(200), nullable=True),
        sa.Column("config_release_keys", sa.JSON(), nullable=True),
        sa.Column("state", sa.String(64), nullable=True),
        sa.Column("errors", sa.JSON(), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=True),
    ]


def upgrade() -> None:
    op.create_table(
        "ms_apps",
        sa.Column("app_id", sa.String(128), primary_key=True),
        sa.Column("signing_key", sa.LargeBinary(64), nullable=False),
        sa.Column("key_generation", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("default_cluster", sa.String(200), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("acl", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "ms_clusters",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("bootstrap_servers", sa.Text(), nullable=False),
        sa.Column("dc", sa.String(100), nullable=False),
        sa.Column("standby", sa.String(200), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("sasl_mechanism", sa.String(32), nullable=True),
        sa.Column("sasl_username", sa.String(255), nullable=True),
        sa.Column("sasl_password", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "ms_nonces",
        sa.Column("app_id", sa.String(128), primary_key=True),
        sa.Column("nonce", sa.String(128), primary_key=True),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_ms_nonces_expires_at", "ms_nonces", ["expires_at"])
    op.create_table(
        "ms_auth_failures",
        sa.Column("scope", sa.String(8), primary_key=True),
        sa.Column("subject", sa.String(255), primary_key=True),
        sa.Column("window_start", sa.BigInteger(), primary_key=True),
        sa.Column("count", sa.Integer(), nullable=False),
    )
    op.create_table(
        "ms_server_keys",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.LargeBinary(128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "ms_client_state",
        sa.Column("app_id", sa.String(128), primary_key=True),
        sa.Column("client_id", sa.String(255), primary_key=True),
        *_client_columns(),
        sa.Column("first_seen", sa.Float(), nullable=False),
        sa.Column("last_seen", sa.Float(), nullable=False),
    )
    op.create_index("ix_ms_client_state_cluster", "ms_client_state", ["cluster"])
    op.create_index("ix_ms_client_state_librdkafka", "ms_client_state", ["librdkafka_version"])
    op.create_index("ix_ms_client_state_group", "ms_client_state", ["group_id"])
    op.create_index("ix_ms_client_state_last_seen", "ms_client_state", ["last_seen"])
    op.create_table(
        "ms_client_reports",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("app_id", sa.String(128), nullable=False),
        sa.Column("client_id", sa.String(255), nullable=False),
        *_client_columns(),
    )
    op.create_index("ix_ms_client_reports_app_at", "ms_client_reports", ["app_id", "at"])
    op.create_index("ix_ms_client_reports_cluster", "ms_client_reports", ["cluster"])
    op.create_index("ix_ms_client_reports_librdkafka", "ms_client_reports", ["librdkafka_version"])
    op.create_index("ix_ms_client_reports_group", "ms_client_reports", ["group_id"])
    op.create_table(
        "ms_audit",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("operator", sa.String(255), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=True),
    )
    op.create_index("ix_ms_audit_at", "ms_audit", ["at"])
    op.create_index("ix_ms_audit_target", "ms_audit", ["target"])


def downgrade() -> None:
    for table in ("ms_audit", "ms_client_reports", "ms_client_state", "ms_server_keys", "ms_auth_failures",
                  "ms_nonces", "ms_clusters", "ms_apps"):
        op.drop_table(table)
