"""SQLAlchemy tables of the config center, shaped after Apollo's ApolloConfigDB / ApolloPortalDB.

Names and meanings follow Apollo so its docs explain our data: an *app namespace* is the definition of a
namespace for an app; a *namespace* is its instance in one cluster (gray branches are child clusters with
their own namespace instance); *items* are the editable key/values; a *release* is an immutable snapshot of
items that clients are served; a *release message* carries the notification id long polls compare against.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base for every config-center table."""


def local_now() -> datetime:
    """Naive local wall-clock time; the Open API renders it with the local offset, as Apollo does."""
    now = datetime.now()
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


#: row ids: BIGINT (Apollo's) on PostgreSQL; INTEGER on SQLite, where only that aliases the rowid
ID = BigInteger().with_variant(Integer(), "sqlite")


def ident(length: int = 64) -> String:
    """An identifier column compared case-insensitively, as Apollo's MySQL collation does."""
    return String(length, collation="NOCASE")


class Audited:
    """Apollo's dataChange* columns, kept because the Open API returns them."""

    created_by: Mapped[str] = mapped_column(String(64), default="")
    modified_by: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=local_now)
    modified_at: Mapped[datetime] = mapped_column(DateTime, default=local_now, onupdate=local_now)


class App(Audited, Base):
    __tablename__ = "apps"

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    app_id: Mapped[str] = mapped_column(ident(64), unique=True)
    name: Mapped[str] = mapped_column(String(500), default="")
    org_id: Mapped[str] = mapped_column(String(32), default="")
    org_name: Mapped[str] = mapped_column(String(64), default="")
    owner_name: Mapped[str] = mapped_column(String(500), default="")
    owner_email: Mapped[str] = mapped_column(String(500), default="")


class Cluster(Audited, Base):
    __tablename__ = "clusters"
    __table_args__ = (UniqueConstraint("app_id", "name"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    app_id: Mapped[str] = mapped_column(ident(64), index=True)
    name: Mapped[str] = mapped_column(ident(64))
    # 0 for a real cluster; the parent's id for a gray-release branch.
    parent_cluster_id: Mapped[int] = mapped_column(ID, default=0)
    comment: Mapped[str] = mapped_column(String(64), default="")


class AppNamespace(Audited, Base):
    __tablename__ = "app_namespaces"
    __table_args__ = (UniqueConstraint("app_id", "name"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    app_id: Mapped[str] = mapped_column(ident(64), index=True)
    name: Mapped[str] = mapped_column(ident(32 * 8), index=True)
    format: Mapped[str] = mapped_column(String(32), default="properties")
    is_public: Mapped[bool] = mapped_column(Boolean, default=False)
    comment: Mapped[str] = mapped_column(String(64), default="")


class Namespace(Audited, Base):
    __tablename__ = "namespaces"
    __table_args__ = (UniqueConstraint("app_id", "cluster_name", "namespace_name"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    app_id: Mapped[str] = mapped_column(ident(64))
    cluster_name: Mapped[str] = mapped_column(ident(64))
    namespace_name: Mapped[str] = mapped_column(ident(32 * 8))


class Item(Audited, Base):
    __tablename__ = "items"
    __table_args__ = (UniqueConstraint("namespace_id", "key"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    namespace_id: Mapped[int] = mapped_column(ID, ForeignKey("namespaces.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(String(128))
    type: Mapped[int] = mapped_column(Integer, default=0)
    value: Mapped[str] = mapped_column(Text, default="")
    comment: Mapped[str] = mapped_column(String(1024), default="")
    line_num: Mapped[int] = mapped_column(Integer, default=0)


class Release(Audited, Base):
    __tablename__ = "releases"
    __table_args__ = (Index("ix_release_ns", "app_id", "namespace_name", "cluster_name", "is_abandoned"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    release_key: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(64), default="")
    comment: Mapped[str] = mapped_column(String(256), default="")
    app_id: Mapped[str] = mapped_column(ident(64))
    cluster_name: Mapped[str] = mapped_column(ident(64))
    namespace_name: Mapped[str] = mapped_column(ident(32 * 8))
    configurations: Mapped[str] = mapped_column(Text)  # JSON object of key -> value
    is_abandoned: Mapped[bool] = mapped_column(Boolean, default=False)
    # For a branch release: JSON list of the keys the branch overrides (Apollo's BRANCH_RELEASE_KEYS),
    # so a later master release or rollback can re-apply them on top of the new master values.
    branch_keys: Mapped[str | None] = mapped_column(Text, nullable=True)


class ReleaseHistory(Base):
    """Every operation that changed what clients are served, for audit and Apollo-like history."""

    __tablename__ = "release_histories"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    app_id: Mapped[str] = mapped_column(ident(64))
    cluster_name: Mapped[str] = mapped_column(ident(64))
    namespace_name: Mapped[str] = mapped_column(ident(32 * 8))
    branch_name: Mapped[str] = mapped_column(ident(64))
    release_id: Mapped[int] = mapped_column(ID, default=0)
    previous_release_id: Mapped[int] = mapped_column(ID, default=0)
    operation: Mapped[int] = mapped_column(Integer)
    operation_context: Mapped[str] = mapped_column(Text, default="{}")
    created_by: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=local_now)


class GrayReleaseRule(Audited, Base):
    __tablename__ = "gray_release_rules"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    app_id: Mapped[str] = mapped_column(ident(64))
    cluster_name: Mapped[str] = mapped_column(ident(64))  # the parent (main) cluster
    namespace_name: Mapped[str] = mapped_column(ident(32 * 8))
    branch_name: Mapped[str] = mapped_column(ident(64))
    rules: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of rule items
    release_id: Mapped[int] = mapped_column(ID, default=0)
    branch_status: Mapped[int] = mapped_column(Integer, default=1)


class ReleaseMessage(Base):
    """One row per namespace key with its latest notification id; AUTOINCREMENT keeps ids monotonic."""

    __tablename__ = "release_messages"
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    message: Mapped[str] = mapped_column(ident(1024), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=local_now)


class ServiceInstance(Base):
    """A running config-service process (discovery): upserted every heartbeat, listed while fresh."""

    __tablename__ = "service_instances"

    instance_id: Mapped[str] = mapped_column(ident(128), primary_key=True)
    homepage_url: Mapped[str] = mapped_column(ident(512))
    heartbeat_at: Mapped[float] = mapped_column(Float)


class ConsumerToken(Base):
    """An Open API token (Apollo's third-party "consumer")."""

    __tablename__ = "consumer_tokens"

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    token: Mapped[str] = mapped_column(String(128), unique=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    all_apps: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=local_now)


class ConsumerApp(Base):
    """An app a scoped token may manage (Apollo's consumer role on an app)."""

    __tablename__ = "consumer_apps"
    __table_args__ = (UniqueConstraint("token_id", "app_id"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    token_id: Mapped[int] = mapped_column(ID, ForeignKey("consumer_tokens.id", ondelete="CASCADE"))
    app_id: Mapped[str] = mapped_column(ident(64))


class AccessKey(Audited, Base):
    """An app's config-service access-key secret.

    Enabled with mode 0 ("filter") it makes signatures mandatory; mode 1 ("observer") only logs bad ones.
    A key with an ``owner`` is a per-app key the MetaServer issued to that ykafka app (issue 37): it opens only
    the namespaces its ``scope`` (JSON: the app's ACL, reachable clusters and namespace prefix) allows
    (keyscope.py); keys without one are Apollo's own, whole-app.
    """

    __tablename__ = "access_keys"

    id: Mapped[int] = mapped_column(ID, primary_key=True)
    app_id: Mapped[str] = mapped_column(ident(64), index=True)
    secret: Mapped[str] = mapped_column(String(128))
    mode: Mapped[int] = mapped_column(Integer, default=0)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    owner: Mapped[str | None] = mapped_column(String(128), nullable=True, default=None)
    scope: Mapped[str | None] = mapped_column(Text, nullable=True, default=None)


class Instance(Base):
    """Apollo's Instance: one client process (app, cluster, data center, IP) that fetched or polled."""

    __tablename__ = "instances"
    __table_args__ = (UniqueConstraint("app_id", "cluster_name", "ip", "data_center", name="uq_instance"),)

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    app_id: Mapped[str] = mapped_column(ident(64))
    cluster_name: Mapped[str] = mapped_column(ident(64))
    data_center: Mapped[str] = mapped_column(String(64), default="")
    ip: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=local_now)
    modified_at: Mapped[datetime] = mapped_column(DateTime, default=local_now, index=True)


class InstanceConfig(Base):
    """Apollo's InstanceConfig: the release an instance holds of one namespace, and when it was last seen."""

    __tablename__ = "instance_configs"
    __table_args__ = (
        UniqueConstraint("instance_id", "config_app_id", "config_namespace_name", name="uq_instance_config"),
        Index("ix_instance_config_ns", "config_app_id", "config_cluster_name", "config_namespace_name"),
    )

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    instance_id: Mapped[int] = mapped_column(ID, ForeignKey("instances.id", ondelete="CASCADE"), index=True)
    config_app_id: Mapped[str] = mapped_column(ident(64))
    config_cluster_name: Mapped[str] = mapped_column(ident(64))
    config_namespace_name: Mapped[str] = mapped_column(ident(32 * 8))
    release_key: Mapped[str] = mapped_column(String(64), index=True)
    release_delivered_at: Mapped[datetime] = mapped_column(DateTime, default=local_now)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=local_now)
    modified_at: Mapped[datetime] = mapped_column(DateTime, default=local_now, index=True)
