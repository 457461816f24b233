"""Broker-side security: per-app SCRAM principals per cluster, and each cluster's last ACL reconcile.

The registry loses its shared SASL user and password (every app reaching a cluster received them) and
gains the cluster's security mode and CA; credentials are issued per (app, cluster) by the MetaServer.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ms_clusters") as batch:
        batch.drop_column("sasl_username")
        batch.drop_column("sasl_password")
        batch.add_column(sa.Column("security_protocol", sa.String(16), nullable=False, server_default="PLAINTEXT"))
        batch.add_column(sa.Column("ssl_ca", sa.Text(), nullable=True))
    op.execute("UPDATE ms_clusters SET sasl_mechanism = NULL")  # the shared credentials are gone
    op.create_table(
        "ms_kafka_principals",
        sa.Column("app_id", sa.String(128), primary_key=True),
        sa.Column("cluster", sa.String(200), primary_key=True),
        sa.Column("generation", sa.Integer(), primary_key=True),
        sa.Column("username", sa.String(255), nullable=False, unique=True),
        sa.Column("password", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("provisioned_at", sa.Float(), nullable=True),
        sa.Column("retire_at", sa.Float(), nullable=True),
    )
    op.create_table(
        "ms_kafka_reconciles",
        sa.Column("cluster", sa.String(200), primary_key=True),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("repairs", sa.Integer(), nullable=False),
        sa.Column("bindings", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ms_kafka_reconciles")
    op.drop_table("ms_kafka_principals")
    with op.batch_alter_table("ms_clusters") as batch:
        batch.drop_column("ssl_ca")
        batch.drop_column("security_protocol")
        batch.add_column(sa.Column("sasl_username", sa.String(255), nullable=True))
        batch.add_column(sa.Column("sasl_password", sa.Text(), nullable=True))
