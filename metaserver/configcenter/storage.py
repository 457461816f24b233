"""Storage of the config center (SQLite or PostgreSQL): engine, short transactions, snapshots and shared lookups.

Every write is one short transaction run off the event loop (the app serializes them). After it commits,
the affected (app, namespace) snapshots are rebuilt for the read model and the release messages it
produced are returned, so the caller can swap the snapshots in first and wake long polls second.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import structlog
from sqlalchemy import Engine, create_engine, delete, event, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from ..storage.db import Schema, make_engine, migrate
from . import models as m
from .errors import BadRequest, NotFound
from .keyscope import KeyScope
from .notify import notify
from .readmodel import (
    AppNamespaceView,
    Credentials,
    GrayRuleView,
    NamespaceState,
    ReleaseView,
    RuleItem,
    ScopedKeyView,
    TokenView,
    message_key,
)

log = structlog.get_logger(__name__)

T = TypeVar("T")

# Apollo's access-key modes and per-app limit.
ACCESS_KEY_FILTER = 0
ACCESS_KEY_OBSERVER = 1
ACCESS_KEY_LIMIT = 5

# Apollo's NamespaceBranchStatus.
BRANCH_DELETED = 0
BRANCH_ACTIVE = 1
BRANCH_MERGED = 2


def unique_key() -> str:
    """UniqueKeyGenerator's shape: `yyyyMMddHHmmss-<16 hex>`; used for release keys and branch names."""
    return datetime.now().strftime("%Y%m%d%H%M%S") + "-" + secrets.token_hex(8)


@dataclass
class Change:
    """What a committed write changed: its result, fresh snapshots, and the messages to publish."""

    result: Any = None
    touched: set[tuple[str, str]] = field(default_factory=set)
    messages: list[tuple[str, int]] = field(default_factory=list)
    app_namespaces_changed: bool = False
    credentials_changed: bool = False
    states: dict[tuple[str, str], NamespaceState] = field(default_factory=dict)
    app_namespace_views: list[AppNamespaceView] | None = None
    credentials: Credentials | None = None


#: the config service's migrations: metaserver's Alembic set-up (env.py, locks), its own revisions and version
#: table; a SQLite file made before migrations existed (tables, no version table) is stamped at cc0001
SCHEMA = Schema(Path(__file__).with_name("migrations"), "cc_alembic_version", m.Base.metadata,
                lock_key=707_020_252, legacy_table="release_messages", legacy_revision="cc0001")


def database_url(db: str) -> str:
    """``db`` as a SQLAlchemy URL: a URL is kept (``postgresql+psycopg://…``), anything else is a SQLite path."""
    return db if "://" in db else f"sqlite:///{db}"


def _engine(db: str) -> Engine:
    url = make_url(database_url(db))
    if url.get_backend_name() != "sqlite":
        return make_engine(url.render_as_string(hide_password=False))
    path = url.database or ":memory:"
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{path}", connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    return engine


class StoreBase:
    """Engine, transactions, read-model snapshots and the lookups every write shares.

    ``db`` is a SQLite file path or a SQLAlchemy URL (PostgreSQL: several config services share one database).
    """

    def __init__(self, db: str) -> None:
        self.db_path = db
        self.engine = _engine(db)
        self.dialect = self.engine.dialect.name
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        migrate(self.engine, SCHEMA)

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------------------------------
    # plumbing
    # ------------------------------------------------------------------------------------------
    def read(self, fn: Callable[[Session], T]) -> T:
        with self._sessions() as s:
            return fn(s)

    def write(self, fn: Callable[[Session, Change], Any]) -> Change:
        change = Change()
        with self._sessions() as s:
            with s.begin():
                change.result = fn(s, change)
            for app_id, ns in change.touched:
                change.states[(app_id, ns)] = self.load_state(s, app_id, ns)
            if change.app_namespaces_changed:
                change.app_namespace_views = self.load_app_namespaces(s)
            if change.credentials_changed:
                change.credentials = self.load_credentials(s)
        return change

    # ------------------------------------------------------------------------------------------
    # snapshots for the read model
    # ------------------------------------------------------------------------------------------
    def load_all(self) -> tuple[dict[tuple[str, str], NamespaceState], list[AppNamespaceView]]:
        """Every namespace's state in a handful of set queries (what :meth:`load_state` reads for one, for all
        at once: a service holding 100,000 namespaces starts in seconds, not in 400,000 queries)."""
        with self._sessions() as s:
            pairs = s.execute(select(m.Namespace.app_id, m.Namespace.namespace_name).distinct()).all()
            states = {(str(a), str(n)): NamespaceState() for a, n in pairs}
            by_key = {(a.lower(), n.lower()): state for (a, n), state in states.items()}
            clusters: dict[str, set[str]] = {}
            for app_id, name in s.execute(select(m.Cluster.app_id, m.Cluster.name)):
                clusters.setdefault(app_id.lower(), set()).add(name.lower())
            latest_ids = (select(func.max(m.Release.id)).where(m.Release.is_abandoned.is_(False))
                          .group_by(m.Release.app_id, m.Release.namespace_name, m.Release.cluster_name))
            for rel in s.scalars(select(m.Release).where(m.Release.id.in_(latest_ids))):
                state = by_key.get((rel.app_id.lower(), rel.namespace_name.lower()))
                if state is not None and rel.cluster_name.lower() in clusters.get(rel.app_id.lower(), ()):
                    state.latest[rel.cluster_name.lower()] = _release_view(rel)
            gray: dict[tuple[str, str], dict[str, list[GrayRuleView]]] = {}
            for rule in s.scalars(select(m.GrayReleaseRule).where(m.GrayReleaseRule.branch_status == BRANCH_ACTIVE)
                                  .order_by(m.GrayReleaseRule.id)):
                key = (rule.app_id.lower(), rule.namespace_name.lower())
                state = by_key.get(key)
                if state is None:
                    continue
                items = tuple(RuleItem.from_json(i) for i in json.loads(rule.rules or "[]"))
                gray.setdefault(key, {}).setdefault(rule.cluster_name.lower(), []).append(
                    GrayRuleView(rule.branch_name, rule.release_id, True, items))
                if rule.release_id:
                    gray_rel = s.get(m.Release, rule.release_id)
                    if gray_rel is not None and not gray_rel.is_abandoned:
                        state.releases[gray_rel.id] = _release_view(gray_rel)
            for key, per_cluster in gray.items():
                by_key[key].gray = {k: tuple(v) for k, v in per_cluster.items()}
            for msg, msg_id in s.execute(select(m.ReleaseMessage.message, func.max(m.ReleaseMessage.id))
                                         .group_by(m.ReleaseMessage.message)):
                if msg.count("+") < 2:
                    continue
                a, cluster, n = msg.split("+", 2)
                state = by_key.get((a.lower(), n.lower()))
                if state is not None and cluster.lower() in clusters.get(a.lower(), ()):
                    state.notifications[cluster.lower()] = max(msg_id, state.notifications.get(cluster.lower(), -1))
            return states, self.load_app_namespaces(s)

    def heartbeat(self, instance_id: str, homepage_url: str) -> None:
        """Record this process as live now (discovery)."""
        with self._sessions() as s, s.begin():
            s.merge(m.ServiceInstance(instance_id=instance_id, homepage_url=homepage_url, heartbeat_at=time.time()))

    def forget_instance(self, instance_id: str) -> None:
        with self._sessions() as s, s.begin():
            s.execute(delete(m.ServiceInstance).where(m.ServiceInstance.instance_id == instance_id))

    def live_instances(self, max_age_s: float) -> list[tuple[str, str]]:
        """(instance id, homepage URL) of every process that heartbeated within ``max_age_s``."""
        with self._sessions() as s:
            rows = s.execute(select(m.ServiceInstance.instance_id, m.ServiceInstance.homepage_url)
                             .where(m.ServiceInstance.heartbeat_at >= time.time() - max_age_s)
                             .order_by(m.ServiceInstance.instance_id)).all()
            return [(str(i), str(u)) for i, u in rows]

    def latest_messages(self) -> dict[str, int]:
        """Release-message key -> its latest id (one row per key is kept): what the scanner compares."""
        with self._sessions() as s:
            rows = s.execute(select(m.ReleaseMessage.message, func.max(m.ReleaseMessage.id))
                             .group_by(m.ReleaseMessage.message)).all()
            return {str(msg): int(msg_id) for msg, msg_id in rows}

    def load_changed(self, keys: list[str]) -> tuple[dict[tuple[str, str], NamespaceState], list[AppNamespaceView]]:
        """Fresh snapshots of the namespaces named by release-message keys (``app+cluster+namespace``)."""
        pairs = {(app, ns) for app, _, ns in (key.split("+", 2) for key in keys if key.count("+") >= 2)}
        with self._sessions() as s:
            return {p: self.load_state(s, *p) for p in pairs}, self.load_app_namespaces(s)

    def load_app_namespaces(self, s: Session) -> list[AppNamespaceView]:
        rows = s.scalars(select(m.AppNamespace)).all()
        return [AppNamespaceView(r.app_id, r.name, r.format, r.is_public) for r in rows]

    def load_credentials(self, s: Session | None = None) -> Credentials:
        if s is None:
            with self._sessions() as fresh:
                return self.load_credentials(fresh)
        by_mode: dict[int, dict[str, list[str]]] = {ACCESS_KEY_FILTER: {}, ACCESS_KEY_OBSERVER: {}}
        scoped: dict[str, list[ScopedKeyView]] = {}
        for key in s.scalars(select(m.AccessKey).where(m.AccessKey.enabled.is_(True))):
            if key.owner is not None:  # a per-app key: always enforced, and only within its scope
                scoped.setdefault(key.app_id.lower(), []).append(
                    ScopedKeyView(key.secret, KeyScope.parse(key.owner, key.scope)))
                continue
            by_mode.setdefault(key.mode, {}).setdefault(key.app_id.lower(), []).append(key.secret)
        grants: dict[int, set[str]] = {}
        for grant in s.scalars(select(m.ConsumerApp)):
            grants.setdefault(grant.token_id, set()).add(grant.app_id.lower())
        tokens = {t.token: TokenView(t.token, t.all_apps, frozenset(grants.get(t.id, ())))
                  for t in s.scalars(select(m.ConsumerToken))}
        return Credentials(tokens, {k: tuple(v) for k, v in by_mode[ACCESS_KEY_FILTER].items()},
                           {k: tuple(v) for k, v in by_mode[ACCESS_KEY_OBSERVER].items()},
                           {k: tuple(v) for k, v in scoped.items()})

    def load_state(self, s: Session, app_id: str, namespace: str) -> NamespaceState:
        state = NamespaceState()
        clusters = {c.name.lower() for c in s.scalars(select(m.Cluster).where(m.Cluster.app_id == app_id))}
        latest_ids = select(func.max(m.Release.id)).where(
            m.Release.app_id == app_id, m.Release.namespace_name == namespace, m.Release.is_abandoned.is_(False),
        ).group_by(m.Release.cluster_name)
        for rel in s.scalars(select(m.Release).where(m.Release.id.in_(latest_ids))):
            if rel.cluster_name.lower() in clusters:
                state.latest[rel.cluster_name.lower()] = _release_view(rel)
        gray: dict[str, list[GrayRuleView]] = {}
        rules = s.scalars(select(m.GrayReleaseRule).where(
            m.GrayReleaseRule.app_id == app_id, m.GrayReleaseRule.namespace_name == namespace,
            m.GrayReleaseRule.branch_status == BRANCH_ACTIVE)).all()
        for rule in rules:
            items = tuple(RuleItem.from_json(i) for i in json.loads(rule.rules or "[]"))
            gray.setdefault(rule.cluster_name.lower(), []).append(
                GrayRuleView(rule.branch_name, rule.release_id, True, items))
            if rule.release_id:
                gray_rel = s.get(m.Release, rule.release_id)
                if gray_rel is not None and not gray_rel.is_abandoned:
                    state.releases[gray_rel.id] = _release_view(gray_rel)
        state.gray = {k: tuple(v) for k, v in gray.items()}
        # keys of this namespace in every cluster of the app (an equality list, not LIKE: PostgreSQL's
        # case-insensitive collation does not support LIKE)
        keys = [message_key(app_id, c, namespace) for c in clusters]
        msgs = s.execute(select(m.ReleaseMessage.message, func.max(m.ReleaseMessage.id))
                         .where(m.ReleaseMessage.message.in_(keys))
                         .group_by(m.ReleaseMessage.message)).all() if keys else []
        for msg, msg_id in msgs:
            a, cluster, n = msg.split("+", 2)
            if a.lower() == app_id.lower() and n.lower() == namespace.lower():
                state.notifications[cluster.lower()] = max(msg_id, state.notifications.get(cluster.lower(), -1))
        return state

    # ------------------------------------------------------------------------------------------
    # lookups shared by writes and reads
    # ------------------------------------------------------------------------------------------
    @staticmethod
    def app(s: Session, app_id: str) -> m.App:
        app = s.scalar(select(m.App).where(m.App.app_id == app_id))
        if app is None:
            raise NotFound("app not found for appId:%s", app_id)
        return app

    @staticmethod
    def cluster(s: Session, app_id: str, name: str) -> m.Cluster:
        StoreBase.app(s, app_id)
        cluster = s.scalar(select(m.Cluster).where(m.Cluster.app_id == app_id, m.Cluster.name == name))
        if cluster is None:
            raise NotFound("cluster not found for appId:%s clusterName:%s", app_id, name)
        return cluster

    @staticmethod
    def namespace(s: Session, app_id: str, cluster: str, namespace: str) -> m.Namespace:
        StoreBase.cluster(s, app_id, cluster)
        ns = s.scalar(select(m.Namespace).where(m.Namespace.app_id == app_id, m.Namespace.cluster_name == cluster,
                                                m.Namespace.namespace_name == namespace))
        if ns is None:
            raise NotFound("namespace not found for appId:%s clusterName:%s namespaceName:%s",
                           app_id, cluster, namespace)
        return ns

    @staticmethod
    def app_namespace(s: Session, app_id: str, name: str) -> m.AppNamespace | None:
        own = s.scalar(select(m.AppNamespace).where(m.AppNamespace.app_id == app_id, m.AppNamespace.name == name))
        if own is not None:
            return own
        return s.scalar(select(m.AppNamespace).where(m.AppNamespace.name == name, m.AppNamespace.is_public.is_(True)))

    @staticmethod
    def items(s: Session, ns: m.Namespace) -> list[m.Item]:
        return list(s.scalars(select(m.Item).where(m.Item.namespace_id == ns.id)
                              .order_by(m.Item.line_num, m.Item.id)))

    @staticmethod
    def item_map(s: Session, ns: m.Namespace) -> dict[str, str]:
        return {i.key: i.value for i in StoreBase.items(s, ns) if i.key}

    @staticmethod
    def latest_release(s: Session, app_id: str, cluster: str, namespace: str) -> m.Release | None:
        return s.scalar(select(m.Release).where(
            m.Release.app_id == app_id, m.Release.cluster_name == cluster, m.Release.namespace_name == namespace,
            m.Release.is_abandoned.is_(False)).order_by(m.Release.id.desc()).limit(1))

    @staticmethod
    def parent_namespace(s: Session, ns: m.Namespace) -> m.Namespace | None:
        """The main-cluster namespace of a branch namespace, None for a main namespace."""
        cluster = s.scalar(select(m.Cluster).where(m.Cluster.app_id == ns.app_id,
                                                   m.Cluster.name == ns.cluster_name))
        if cluster is None or not cluster.parent_cluster_id:
            return None
        parent = s.get(m.Cluster, cluster.parent_cluster_id)
        if parent is None:
            return None
        return s.scalar(select(m.Namespace).where(m.Namespace.app_id == ns.app_id,
                                                  m.Namespace.cluster_name == parent.name,
                                                  m.Namespace.namespace_name == ns.namespace_name))

    @staticmethod
    def child_namespace(s: Session, app_id: str, cluster: str, namespace: str) -> m.Namespace | None:
        """The gray branch of a main namespace, if one exists."""
        parent = s.scalar(select(m.Cluster).where(m.Cluster.app_id == app_id, m.Cluster.name == cluster))
        if parent is None:
            return None
        children = [c.name for c in s.scalars(select(m.Cluster).where(m.Cluster.parent_cluster_id == parent.id))]
        if not children:
            return None
        return s.scalar(select(m.Namespace).where(m.Namespace.app_id == app_id,
                                                  m.Namespace.cluster_name.in_(children),
                                                  m.Namespace.namespace_name == namespace))

    def branch(self, s: Session, app_id: str, cluster: str, namespace: str, branch: str) -> tuple[m.Namespace,
                                                                                                  m.Namespace]:
        """Apollo's checkBranch: the parent namespace and the branch namespace, or 400."""
        try:
            parent = self.namespace(s, app_id, cluster, namespace)
        except NotFound:
            raise BadRequest("namespace not exist for appId:%s clusterName:%s namespaceName:%s",
                             app_id, cluster, namespace) from None
        child = self.child_namespace(s, app_id, cluster, namespace)
        if child is None or child.cluster_name.lower() != branch.lower():
            raise BadRequest("Namespace's branch not exist. AppId = %s, ClusterName = %s, NamespaceName = %s, "
                             "BranchName = %s", app_id, cluster, namespace, branch)
        return parent, child

    # ------------------------------------------------------------------------------------------
    # release machinery
    # ------------------------------------------------------------------------------------------
    @staticmethod
    def send_message(s: Session, change: Change, app_id: str, cluster: str, namespace: str) -> None:
        """Record a release message (new, monotonically increasing id) and note it for publishing."""
        msg = message_key(app_id, cluster, namespace)
        if s.get_bind().dialect.name == "postgresql":
            # several instances releasing one namespace at once: the message ids of a key are taken in commit
            # order (held to the end of the transaction), so the last commit carries the highest id and every
            # scanner that sees it reloads after both releases committed
            s.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": msg.lower()})
        row = m.ReleaseMessage(message=msg)
        s.add(row)
        s.flush()
        s.execute(delete(m.ReleaseMessage).where(m.ReleaseMessage.message == msg, m.ReleaseMessage.id < row.id))
        if s.get_bind().dialect.name == "postgresql":
            notify(s.connection(), row.id)  # wakes the other instances' scanners on commit
        change.messages.append((msg, row.id))
        change.touched.add((app_id, namespace))


def _release_view(rel: m.Release) -> ReleaseView:
    return ReleaseView(rel.id, rel.release_key, rel.app_id, rel.cluster_name, rel.namespace_name,
                       json.loads(rel.configurations))
