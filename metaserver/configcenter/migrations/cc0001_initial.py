"""Initial config-service schema (Apollo's ApolloConfigDB shape): apps, clusters, namespaces, items, releases,
gray rules, release messages, discovery rows, Open API tokens, access keys, client instances.

Identifier columns compare case-insensitively, as Apollo's MySQL collation does: SQLite's built-in NOCASE,
and on PostgreSQL a nondeterministic ICU collation of the same name created here.

Revision ID: cc0001
Revises:
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "cc0001"
down_revision = None
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # models.ID


def _audited() -> list[sa.Column]:
    """models.Audited: Apollo's dataChange* columns."""
    return [sa.Column("created_by", sa.String(length=64), nullable=False),
            sa.Column("modified_by", sa.String(length=64), nullable=False),
            sa.Column("created_at", sa.DateTime(), nullable=False),
            sa.Column("modified_at", sa.DateTime(), nullable=False)]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute('CREATE COLLATION IF NOT EXISTS "NOCASE" '
                   "(provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
    op.create_table("access_keys",
    sa.Column("id", _ID, nullable=False),
    sa.Column("app_id", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("secret", sa.String(length=128), nullable=False),
    sa.Column("mode", sa.Integer(), nullable=False),
    sa.Column("enabled", sa.Boolean(), nullable=False),
    *_audited(),
    sa.PrimaryKeyConstraint("id")
    )
    with op.batch_alter_table("access_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_access_keys_app_id"), ["app_id"], unique=False)

    op.create_table("app_namespaces",
    sa.Column("id", _ID, nullable=False),
    sa.Column("app_id", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("name", sa.String(length=256, collation="NOCASE"), nullable=False),
    sa.Column("format", sa.String(length=32), nullable=False),
    sa.Column("is_public", sa.Boolean(), nullable=False),
    sa.Column("comment", sa.String(length=64), nullable=False),
    *_audited(),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("app_id", "name")
    )
    with op.batch_alter_table("app_namespaces", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_app_namespaces_app_id"), ["app_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_app_namespaces_name"), ["name"], unique=False)

    op.create_table("apps",
    sa.Column("id", _ID, nullable=False),
    sa.Column("app_id", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("name", sa.String(length=500), nullable=False),
    sa.Column("org_id", sa.String(length=32), nullable=False),
    sa.Column("org_name", sa.String(length=64), nullable=False),
    sa.Column("owner_name", sa.String(length=500), nullable=False),
    sa.Column("owner_email", sa.String(length=500), nullable=False),
    *_audited(),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("app_id")
    )
    op.create_table("clusters",
    sa.Column("id", _ID, nullable=False),
    sa.Column("app_id", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("name", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("parent_cluster_id", _ID, nullable=False),
    sa.Column("comment", sa.String(length=64), nullable=False),
    *_audited(),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("app_id", "name")
    )
    with op.batch_alter_table("clusters", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_clusters_app_id"), ["app_id"], unique=False)

    op.create_table("consumer_tokens",
    sa.Column("id", _ID, nullable=False),
    sa.Column("token", sa.String(length=128), nullable=False),
    sa.Column("name", sa.String(length=128), nullable=False),
    sa.Column("all_apps", sa.Boolean(), nullable=False),
    sa.Column("created_at", sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("token")
    )
    op.create_table("gray_release_rules",
    sa.Column("id", _ID, autoincrement=True, nullable=False),
    sa.Column("app_id", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("cluster_name", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("namespace_name", sa.String(length=256, collation="NOCASE"), nullable=False),
    sa.Column("branch_name", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("rules", sa.Text(), nullable=False),
    sa.Column("release_id", _ID, nullable=False),
    sa.Column("branch_status", sa.Integer(), nullable=False),
    *_audited(),
    sa.PrimaryKeyConstraint("id")
    )
    op.create_table("instances",
    sa.Column("id", _ID, autoincrement=True, nullable=False),
    sa.Column("app_id", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("cluster_name", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("data_center", sa.String(length=64), nullable=False),
    sa.Column("ip", sa.String(length=64), nullable=False),
    sa.Column("created_at", sa.DateTime(), nullable=False),
    sa.Column("modified_at", sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("app_id", "cluster_name", "ip", "data_center", name="uq_instance")
    )
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_instances_modified_at"), ["modified_at"], unique=False)

    op.create_table("namespaces",
    sa.Column("id", _ID, nullable=False),
    sa.Column("app_id", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("cluster_name", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("namespace_name", sa.String(length=256, collation="NOCASE"), nullable=False),
    *_audited(),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("app_id", "cluster_name", "namespace_name")
    )
    op.create_table("release_histories",
    sa.Column("id", _ID, autoincrement=True, nullable=False),
    sa.Column("app_id", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("cluster_name", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("namespace_name", sa.String(length=256, collation="NOCASE"), nullable=False),
    sa.Column("branch_name", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("release_id", _ID, nullable=False),
    sa.Column("previous_release_id", _ID, nullable=False),
    sa.Column("operation", sa.Integer(), nullable=False),
    sa.Column("operation_context", sa.Text(), nullable=False),
    sa.Column("created_by", sa.String(length=64), nullable=False),
    sa.Column("created_at", sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint("id")
    )
    op.create_table("release_messages",
    sa.Column("id", _ID, autoincrement=True, nullable=False),
    sa.Column("message", sa.String(length=1024, collation="NOCASE"), nullable=False),
    sa.Column("created_at", sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table("release_messages", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_release_messages_message"), ["message"], unique=False)

    op.create_table("releases",
    sa.Column("id", _ID, autoincrement=True, nullable=False),
    sa.Column("release_key", sa.String(length=64), nullable=False),
    sa.Column("name", sa.String(length=64), nullable=False),
    sa.Column("comment", sa.String(length=256), nullable=False),
    sa.Column("app_id", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("cluster_name", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("namespace_name", sa.String(length=256, collation="NOCASE"), nullable=False),
    sa.Column("configurations", sa.Text(), nullable=False),
    sa.Column("is_abandoned", sa.Boolean(), nullable=False),
    sa.Column("branch_keys", sa.Text(), nullable=True),
    *_audited(),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("release_key")
    )
    with op.batch_alter_table("releases", schema=None) as batch_op:
        batch_op.create_index("ix_release_ns", ["app_id", "namespace_name", "cluster_name", "is_abandoned"],
                              unique=False)

    op.create_table("service_instances",
    sa.Column("instance_id", sa.String(length=128, collation="NOCASE"), nullable=False),
    sa.Column("homepage_url", sa.String(length=512, collation="NOCASE"), nullable=False),
    sa.Column("heartbeat_at", sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint("instance_id")
    )
    op.create_table("consumer_apps",
    sa.Column("id", _ID, nullable=False),
    sa.Column("token_id", _ID, nullable=False),
    sa.Column("app_id", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.ForeignKeyConstraint(["token_id"], ["consumer_tokens.id"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("token_id", "app_id")
    )
    op.create_table("instance_configs",
    sa.Column("id", _ID, autoincrement=True, nullable=False),
    sa.Column("instance_id", _ID, nullable=False),
    sa.Column("config_app_id", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("config_cluster_name", sa.String(length=64, collation="NOCASE"), nullable=False),
    sa.Column("config_namespace_name", sa.String(length=256, collation="NOCASE"), nullable=False),
    sa.Column("release_key", sa.String(length=64), nullable=False),
    sa.Column("release_delivered_at", sa.DateTime(), nullable=False),
    sa.Column("created_at", sa.DateTime(), nullable=False),
    sa.Column("modified_at", sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(["instance_id"], ["instances.id"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("instance_id", "config_app_id", "config_namespace_name", name="uq_instance_config")
    )
    with op.batch_alter_table("instance_configs", schema=None) as batch_op:
        batch_op.create_index("ix_instance_config_ns",
                              ["config_app_id", "config_cluster_name", "config_namespace_name"],
                              unique=False)
        batch_op.create_index(batch_op.f("ix_instance_configs_instance_id"), ["instance_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_instance_configs_modified_at"), ["modified_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_instance_configs_release_key"), ["release_key"], unique=False)

    op.create_table("items",
    sa.Column("id", _ID, nullable=False),
    sa.Column("namespace_id", _ID, nullable=False),
    sa.Column("key", sa.String(length=128), nullable=False),
    sa.Column("type", sa.Integer(), nullable=False),
    sa.Column("value", sa.Text(), nullable=False),
    sa.Column("comment", sa.String(length=1024), nullable=False),
    sa.Column("line_num", sa.Integer(), nullable=False),
    *_audited(),
    sa.ForeignKeyConstraint(["namespace_id"], ["namespaces.id"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("id"),
    sa.UniqueConstraint("namespace_id", "key")
    )
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_items_namespace_id"), ["namespace_id"], unique=False)



def downgrade() -> None:
    with op.batch_alter_table("items", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_items_namespace_id"))

    op.drop_table("items")
    with op.batch_alter_table("instance_configs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_instance_configs_release_key"))
        batch_op.drop_index(batch_op.f("ix_instance_configs_modified_at"))
        batch_op.drop_index(batch_op.f("ix_instance_configs_instance_id"))
        batch_op.drop_index("ix_instance_config_ns")

    op.drop_table("instance_configs")
    op.drop_table("consumer_apps")
    op.drop_table("service_instances")
    with op.batch_alter_table("releases", schema=None) as batch_op:
        batch_op.drop_index("ix_release_ns")

    op.drop_table("releases")
    with op.batch_alter_table("release_messages", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_release_messages_message"))

    op.drop_table("release_messages")
    op.drop_table("release_histories")
    op.drop_table("namespaces")
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_instances_modified_at"))

    op.drop_table("instances")
    op.drop_table("gray_release_rules")
    op.drop_table("consumer_tokens")
    with op.batch_alter_table("clusters", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_clusters_app_id"))

    op.drop_table("clusters")
    op.drop_table("apps")
    with op.batch_alter_table("app_namespaces", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_app_namespaces_name"))
        batch_op.drop_index(batch_op.f("ix_app_namespaces_app_id"))

    op.drop_table("app_namespaces")
    with op.batch_alter_table("access_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_access_keys_app_id"))

    op.drop_table("access_keys")
    if op.get_bind().dialect.name == "postgresql":
        op.execute('DROP COLLATION IF EXISTS "NOCASE"')
