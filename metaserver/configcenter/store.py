"""SQLite persistence and the write operations of the config center (Apollo's admin-service logic).

Every write is one short transaction run off the event loop (the app serializes them). After it commits,
the affected (app, namespace) snapshots are rebuilt for the read model and the release messages it
produced are returned, so the caller can swap the snapshots in first and wake long polls second.

The release logic mirrors Apollo's ReleaseService / NamespaceBranchService: branch (gray) releases are the
parent's latest release plus the branch items; a master release or rollback re-applies the branch's keys on
top of the new master values; merge folds branch items into master and publishes it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import structlog
from sqlalchemy import Engine, create_engine, delete, event, func, select
from sqlalchemy.orm import Session, sessionmaker

from metaserver.configcenter import dto
from metaserver.configcenter import models as m
from metaserver.configcenter.errors import BadRequest, NotFound
from metaserver.configcenter.readmodel import (
    CLUSTER_DEFAULT,
    NAMESPACE_APPLICATION,
    AppNamespaceView,
    Credentials,
    GrayRuleView,
    NamespaceState,
    ReleaseView,
    RuleItem,
    TokenView,
    message_key,
)

log = structlog.get_logger(__name__)

T = TypeVar("T")

# Apollo's ReleaseOperation codes, kept in release history.
NORMAL_RELEASE = 0
ROLLBACK = 1
GRAY_RELEASE = 2
APPLY_GRAY_RULES = 3
GRAY_RELEASE_MERGE_TO_MASTER = 4
MASTER_NORMAL_RELEASE_MERGE_TO_GRAY = 5
MASTER_ROLLBACK_MERGE_TO_GRAY = 6
ABANDON_GRAY_RELEASE = 7
GRAY_RELEASE_DELETED_AFTER_MERGE = 8

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


def _engine(db_path: str) -> Engine:
    path = Path(db_path)
    if db_path != ":memory:":
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{db_path}", connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    return engine


class Store:
    """The config center's database: schema, snapshot loading, and every write operation."""

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        self.engine = _engine(db_path)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        m.Base.metadata.create_all(self.engine)

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
        with self._sessions() as s:
            pairs = s.execute(select(m.Namespace.app_id, m.Namespace.namespace_name).distinct()).all()
            states = {(a, n): self.load_state(s, a, n) for a, n in pairs}
            return states, self.load_app_namespaces(s)

    def load_app_namespaces(self, s: Session) -> list[AppNamespaceView]:
        rows = s.scalars(select(m.AppNamespace)).all()
        return [AppNamespaceView(r.app_id, r.name, r.format, r.is_public) for r in rows]

    def load_credentials(self, s: Session | None = None) -> Credentials:
        if s is None:
            with self._sessions() as fresh:
                return self.load_credentials(fresh)
        by_mode: dict[int, dict[str, list[str]]] = {ACCESS_KEY_FILTER: {}, ACCESS_KEY_OBSERVER: {}}
        for key in s.scalars(select(m.AccessKey).where(m.AccessKey.enabled.is_(True))):
            by_mode.setdefault(key.mode, {}).setdefault(key.app_id.lower(), []).append(key.secret)
        grants: dict[int, set[str]] = {}
        for grant in s.scalars(select(m.ConsumerApp)):
            grants.setdefault(grant.token_id, set()).add(grant.app_id.lower())
        tokens = {t.token: TokenView(t.token, t.all_apps, frozenset(grants.get(t.id, ())))
                  for t in s.scalars(select(m.ConsumerToken))}
        return Credentials(tokens, {k: tuple(v) for k, v in by_mode[ACCESS_KEY_FILTER].items()},
                           {k: tuple(v) for k, v in by_mode[ACCESS_KEY_OBSERVER].items()})

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
        prefix = app_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        suffix = namespace.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        msgs = s.execute(select(m.ReleaseMessage.message, func.max(m.ReleaseMessage.id))
                         .where(m.ReleaseMessage.message.like(f"{prefix}+%+{suffix}", escape="\\"))
                         .group_by(m.ReleaseMessage.message)).all()
        for msg, msg_id in msgs:
            a, cluster, n = msg.split("+", 2)
            if a.lower() == app_id.lower() and n.lower() == namespace.lower():
                state.notifications[cluster.lower()] = max(msg_id, state.notifications.get(cluster.lower(), -1))
        return state

    # ------------------------------------------------------------------------------------------
    # admin (CLI)
    # ------------------------------------------------------------------------------------------
    def create_token(self, token: str | None = None, name: str = "", all_apps: bool = True,
                     app_ids: Sequence[str] = ()) -> str:
        """Create an Open API token (idempotent when the token already exists); returns it."""
        value = token or secrets.token_hex(20)

        def op(s: Session, change: Change) -> str:
            row = s.scalar(select(m.ConsumerToken).where(m.ConsumerToken.token == value))
            if row is None:
                row = m.ConsumerToken(token=value, name=name, all_apps=all_apps)
                s.add(row)
                s.flush()
            elif all_apps and not row.all_apps:
                row.all_apps = True
            for app_id in app_ids:
                if s.scalar(select(m.ConsumerApp).where(m.ConsumerApp.token_id == row.id,
                                                        m.ConsumerApp.app_id == app_id)) is None:
                    s.add(m.ConsumerApp(token_id=row.id, app_id=app_id))
            change.credentials_changed = True
            return value

        return str(self.write(op).result)

    def add_access_key(self, app_id: str, secret: str | None = None, operator: str = "apollo") -> str:
        """Add an enabled, enforced access-key secret to an app (32 hex chars, like Apollo's); returns it."""
        value = secret or secrets.token_hex(16)
        self.write(lambda s, change: self._new_access_key(s, change, app_id, value, True, operator))
        return value

    @staticmethod
    def _new_access_key(s: Session, change: Change, app_id: str, secret: str, enabled: bool,
                        operator: str) -> dict[str, Any]:
        count = s.scalar(select(func.count(m.AccessKey.id)).where(m.AccessKey.app_id == app_id)) or 0
        if count >= ACCESS_KEY_LIMIT:
            raise BadRequest("AccessKeys count limit exceeded")
        key = m.AccessKey(app_id=app_id, secret=secret, mode=ACCESS_KEY_FILTER, enabled=enabled, created_by=operator,
                          modified_by=operator)
        s.add(key)
        s.flush()
        change.credentials_changed = True
        return dto.access_key_dto(key)

    def create_access_key(self, app_id: str, operator: str) -> Change:
        """Open API: a new secret, disabled until activated (as Apollo)."""

        def op(s: Session, change: Change) -> dict[str, Any]:
            app = self.app(s, app_id)
            return self._new_access_key(s, change, app.app_id, secrets.token_hex(16), False, operator)

        return self.write(op)

    def update_access_key(self, app_id: str, key_id: int, enabled: bool, mode: int, operator: str) -> Change:
        def op(s: Session, change: Change) -> None:
            key = s.scalar(select(m.AccessKey).where(m.AccessKey.app_id == app_id, m.AccessKey.id == key_id))
            if key is None:
                raise BadRequest("accessKey not exist.")
            key.enabled, key.mode, key.modified_by = enabled, mode, operator
            change.credentials_changed = True

        return self.write(op)

    def delete_access_key(self, app_id: str, key_id: int, operator: str) -> Change:
        def op(s: Session, change: Change) -> None:
            key = s.scalar(select(m.AccessKey).where(m.AccessKey.app_id == app_id, m.AccessKey.id == key_id))
            if key is None:
                raise BadRequest("accessKey not exist.")
            if key.enabled:
                raise BadRequest("AccessKey should disable first")
            s.delete(key)
            change.credentials_changed = True
            log.info("configcenter.accesskey_deleted", app_id=app_id, id=key_id, operator=operator)

        return self.write(op)

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
        Store.app(s, app_id)
        cluster = s.scalar(select(m.Cluster).where(m.Cluster.app_id == app_id, m.Cluster.name == name))
        if cluster is None:
            raise NotFound("cluster not found for appId:%s clusterName:%s", app_id, name)
        return cluster

    @staticmethod
    def namespace(s: Session, app_id: str, cluster: str, namespace: str) -> m.Namespace:
        Store.cluster(s, app_id, cluster)
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
        return {i.key: i.value for i in Store.items(s, ns) if i.key}

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
        row = m.ReleaseMessage(message=msg)
        s.add(row)
        s.flush()
        s.execute(delete(m.ReleaseMessage).where(m.ReleaseMessage.message == msg, m.ReleaseMessage.id < row.id))
        change.messages.append((msg, row.id))
        change.touched.add((app_id, namespace))

    @staticmethod
    def _history(s: Session, app_id: str, cluster: str, namespace: str, branch: str, release_id: int,
                 previous_id: int, operation: int, operator: str, context: dict[str, Any] | None = None) -> None:
        s.add(m.ReleaseHistory(app_id=app_id, cluster_name=cluster, namespace_name=namespace, branch_name=branch,
                               release_id=release_id, previous_release_id=previous_id, operation=operation,
                               operation_context=json.dumps(context or {}), created_by=operator))

    @staticmethod
    def _create_release(s: Session, ns: m.Namespace, name: str, comment: str, configurations: dict[str, str],
                        operator: str, branch_keys: Iterable[str] | None = None) -> m.Release:
        rel = m.Release(release_key=unique_key(), name=name, comment=comment or "", app_id=ns.app_id,
                        cluster_name=ns.cluster_name, namespace_name=ns.namespace_name,
                        configurations=json.dumps(configurations, ensure_ascii=False), is_abandoned=False,
                        branch_keys=json.dumps(list(branch_keys)) if branch_keys is not None else None,
                        created_by=operator, modified_by=operator)
        s.add(rel)
        s.flush()
        return rel

    def _master_release(self, s: Session, ns: m.Namespace, name: str, comment: str, configs: dict[str, str],
                        operator: str, operation: int, context: dict[str, Any] | None = None) -> m.Release:
        previous = self.latest_release(s, ns.app_id, ns.cluster_name, ns.namespace_name)
        rel = self._create_release(s, ns, name, comment, configs, operator)
        self._history(s, ns.app_id, ns.cluster_name, ns.namespace_name, ns.cluster_name, rel.id,
                      previous.id if previous else 0, operation, operator, context)
        return rel

    def _branch_release(self, s: Session, parent: m.Namespace, child: m.Namespace, name: str, comment: str,
                        configs: dict[str, str], base_release_id: int, operator: str, operation: int,
                        branch_keys: Iterable[str] | None) -> m.Release:
        previous = self.latest_release(s, child.app_id, child.cluster_name, child.namespace_name)
        keys = list(branch_keys) if branch_keys is not None else None
        rel = self._create_release(s, child, name, comment, configs, operator, keys)
        rule = self._rule(s, parent, child.cluster_name)
        if rule is not None:
            rule.release_id = rel.id
            rule.modified_by = operator
        self._history(s, parent.app_id, parent.cluster_name, parent.namespace_name, child.cluster_name, rel.id,
                      previous.id if previous else 0, operation, operator,
                      {"baseReleaseId": base_release_id, "branchReleaseKeys": keys})
        return rel

    @staticmethod
    def _rule(s: Session, parent: m.Namespace, branch: str) -> m.GrayReleaseRule | None:
        return s.scalar(select(m.GrayReleaseRule).where(
            m.GrayReleaseRule.app_id == parent.app_id, m.GrayReleaseRule.cluster_name == parent.cluster_name,
            m.GrayReleaseRule.namespace_name == parent.namespace_name, m.GrayReleaseRule.branch_name == branch,
        ).order_by(m.GrayReleaseRule.id.desc()).limit(1))

    @staticmethod
    def _branch_modified(master_old: dict[str, str] | None, branch_configs: dict[str, str],
                         branch_keys: list[str] | None) -> dict[str, str]:
        """calculateBranchModifiedItemsAccordingToRelease: what the branch overrides."""
        if not branch_configs:
            return {}
        if branch_keys is not None:
            return {k: branch_configs[k] for k in branch_keys if k in branch_configs}
        if not master_old:
            return dict(branch_configs)
        return {k: v for k, v in branch_configs.items() if master_old.get(k) != v}

    def _remerge_branch(self, s: Session, parent: m.Namespace, master_old: dict[str, str] | None,
                        master_new: dict[str, str], base_release_id: int, name: str, comment: str,
                        operator: str, operation: int) -> None:
        """After a master release or rollback, re-publish the branch as new master + branch overrides."""
        child = self.child_namespace(s, parent.app_id, parent.cluster_name, parent.namespace_name)
        if child is None:
            return
        child_latest = self.latest_release(s, child.app_id, child.cluster_name, child.namespace_name)
        if child_latest is None:
            return
        child_configs: dict[str, str] = json.loads(child_latest.configurations)
        keys = json.loads(child_latest.branch_keys) if child_latest.branch_keys else None
        to_publish = {**master_new, **self._branch_modified(master_old, child_configs, keys)}
        if to_publish != child_configs:
            self._branch_release(s, parent, child, name, comment, to_publish, base_release_id, operator,
                                 operation, keys)

    # ------------------------------------------------------------------------------------------
    # apps, clusters, app namespaces
    # ------------------------------------------------------------------------------------------
    def create_app(self, app: dict[str, str], admins: Sequence[str], operator: str,
                   grant_token: str | None) -> Change:
        def op(s: Session, change: Change) -> None:
            app_id = app["appId"]
            if s.scalar(select(m.App).where(m.App.app_id == app_id)) is not None:
                raise BadRequest("app already exists for appId:%s", app_id)
            s.add(m.App(app_id=app_id, name=app.get("name", ""), org_id=app.get("orgId", ""),
                        org_name=app.get("orgName", ""), owner_name=app.get("ownerName", ""),
                        owner_email=app.get("ownerEmail", ""), created_by=operator, modified_by=operator))
            s.add(m.Cluster(app_id=app_id, name=CLUSTER_DEFAULT, parent_cluster_id=0, created_by=operator,
                            modified_by=operator))
            s.add(m.AppNamespace(app_id=app_id, name=NAMESPACE_APPLICATION, format="properties", is_public=False,
                                 comment="default app namespace", created_by=operator, modified_by=operator))
            s.add(m.Namespace(app_id=app_id, cluster_name=CLUSTER_DEFAULT, namespace_name=NAMESPACE_APPLICATION,
                              created_by=operator, modified_by=operator))
            if grant_token is not None:
                token = s.scalar(select(m.ConsumerToken).where(m.ConsumerToken.token == grant_token))
                if token is not None and not token.all_apps:
                    s.add(m.ConsumerApp(token_id=token.id, app_id=app_id))
                    change.credentials_changed = True
            change.app_namespaces_changed = True
            change.touched.add((app_id, NAMESPACE_APPLICATION))
            log.info("configcenter.app_created", app_id=app_id, operator=operator, admins=list(admins))

        return self.write(op)

    def create_app_namespace(self, app_id: str, name: str, fmt: str, is_public: bool, append_prefix: bool,
                             comment: str, operator: str) -> Change:
        def op(s: Session, change: Change) -> dict[str, Any]:
            app = s.scalar(select(m.App).where(m.App.app_id == app_id))
            if app is None:
                raise BadRequest("app not exists for appId:%s", app_id)
            full = (f"{app.org_id}." if is_public and append_prefix and app.org_id else "") + name
            if fmt != "properties":
                full += "." + fmt
            existing_public = s.scalar(select(m.AppNamespace).where(m.AppNamespace.name == full,
                                                                    m.AppNamespace.is_public.is_(True)))
            if is_public:
                if existing_public is not None:
                    raise BadRequest("Public AppNamespace %s already exists in appId: %s!", full,
                                     existing_public.app_id)
                if s.scalar(select(m.AppNamespace).where(m.AppNamespace.name == full)) is not None:
                    raise BadRequest("AppNamespace %s already exists!", full)
            else:
                if s.scalar(select(m.AppNamespace).where(m.AppNamespace.app_id == app.app_id,
                                                         m.AppNamespace.name == full)) is not None:
                    raise BadRequest("Private AppNamespace %s already exists!", full)
                if existing_public is not None:
                    raise BadRequest("AppNamespace %s already exists as public namespace in appId: %s!", full,
                                     existing_public.app_id)
            ans = m.AppNamespace(app_id=app.app_id, name=full, format=fmt, is_public=is_public, comment=comment,
                                 created_by=operator, modified_by=operator)
            s.add(ans)
            for cluster in s.scalars(select(m.Cluster).where(m.Cluster.app_id == app.app_id,
                                                              m.Cluster.parent_cluster_id == 0)):
                s.add(m.Namespace(app_id=app.app_id, cluster_name=cluster.name, namespace_name=full,
                                  created_by=operator, modified_by=operator))
            s.flush()
            change.app_namespaces_changed = True
            change.touched.add((app.app_id, full))
            log.info("configcenter.namespace_created", app_id=app.app_id, namespace=full, public=is_public)
            return dto.app_namespace_dto(ans)

        return self.write(op)

    def create_cluster(self, app_id: str, name: str, operator: str) -> Change:
        def op(s: Session, change: Change) -> dict[str, Any]:
            app = s.scalar(select(m.App).where(m.App.app_id == app_id))
            if app is None:
                raise BadRequest("app not exists for appId:%s", app_id)
            if s.scalar(select(m.Cluster).where(m.Cluster.app_id == app_id, m.Cluster.name == name)) is not None:
                raise BadRequest("cluster already exists for clusterName:%s", name)
            cluster = m.Cluster(app_id=app.app_id, name=name, parent_cluster_id=0, created_by=operator,
                                modified_by=operator)
            s.add(cluster)
            for ans in s.scalars(select(m.AppNamespace).where(m.AppNamespace.app_id == app.app_id)):
                s.add(m.Namespace(app_id=app.app_id, cluster_name=name, namespace_name=ans.name,
                                  created_by=operator, modified_by=operator))
                change.touched.add((app.app_id, ans.name))
            s.flush()
            return dto.cluster_dto(cluster)

        return self.write(op)

    # ------------------------------------------------------------------------------------------
    # items
    # ------------------------------------------------------------------------------------------
    def create_item(self, app_id: str, cluster: str, namespace: str, key: str, value: str, comment: str,
                    item_type: int, operator: str) -> Change:
        def op(s: Session, _: Change) -> dict[str, Any]:
            ns = self.namespace(s, app_id, cluster, namespace)
            if s.scalar(select(m.Item).where(m.Item.namespace_id == ns.id, m.Item.key == key)) is not None:
                raise BadRequest("item already exists for itemKey:%s", key)
            line = (s.scalar(select(func.max(m.Item.line_num)).where(m.Item.namespace_id == ns.id)) or 0) + 1
            item = m.Item(namespace_id=ns.id, key=key, value=value, comment=comment, type=item_type, line_num=line,
                          created_by=operator, modified_by=operator)
            s.add(item)
            s.flush()
            return dto.item_dto(item)

        return self.write(op)

    def update_item(self, app_id: str, cluster: str, namespace: str, key: str, value: str, comment: str | None,
                    item_type: int | None, operator: str, created_by: str, create_if_not_exists: bool) -> Change:
        def op(s: Session, _: Change) -> None:
            ns = self.namespace(s, app_id, cluster, namespace)
            item = s.scalar(select(m.Item).where(m.Item.namespace_id == ns.id, m.Item.key == key))
            if item is None:
                if not create_if_not_exists:
                    raise NotFound("item not found for appId:%s clusterName:%s namespaceName:%s itemKey:%s",
                                   app_id, cluster, namespace, key)
                line = (s.scalar(select(func.max(m.Item.line_num)).where(m.Item.namespace_id == ns.id)) or 0) + 1
                s.add(m.Item(namespace_id=ns.id, key=key, value=value, comment=comment or "", type=item_type or 0,
                             line_num=line, created_by=created_by or operator, modified_by=operator))
                return
            item.value = value
            if comment is not None:
                item.comment = comment
            if item_type is not None:
                item.type = item_type
            item.modified_by = operator

        return self.write(op)

    def delete_item(self, app_id: str, cluster: str, namespace: str, key: str, operator: str) -> Change:
        def op(s: Session, _: Change) -> None:
            ns = self.namespace(s, app_id, cluster, namespace)
            item = s.scalar(select(m.Item).where(m.Item.namespace_id == ns.id, m.Item.key == key))
            if item is None:
                raise NotFound("item not found for appId:%s clusterName:%s namespaceName:%s itemKey:%s",
                               app_id, cluster, namespace, key)
            s.delete(item)
            log.info("configcenter.item_deleted", app_id=app_id, cluster=cluster, namespace=namespace, key=key,
                     operator=operator)

        return self.write(op)

    # ------------------------------------------------------------------------------------------
    # releases
    # ------------------------------------------------------------------------------------------
    def publish(self, app_id: str, cluster: str, namespace: str, title: str, comment: str,
                operator: str) -> Change:
        """ReleaseService.publish: a master release (re-merging any branch) or, for a branch, a gray one."""

        def op(s: Session, change: Change) -> dict[str, Any]:
            ns = self.namespace(s, app_id, cluster, namespace)
            items = self.item_map(s, ns)
            parent = self.parent_namespace(s, ns)
            if parent is not None:
                parent_latest = self.latest_release(s, parent.app_id, parent.cluster_name, parent.namespace_name)
                base = json.loads(parent_latest.configurations) if parent_latest else {}
                rel = self._branch_release(s, parent, ns, title, comment, {**base, **items},
                                           parent_latest.id if parent_latest else 0, operator, GRAY_RELEASE,
                                           items.keys())
                self.send_message(s, change, parent.app_id, parent.cluster_name, parent.namespace_name)
            else:
                previous = self.latest_release(s, ns.app_id, ns.cluster_name, ns.namespace_name)
                rel = self._master_release(s, ns, title, comment, items, operator, NORMAL_RELEASE)
                self._remerge_branch(s, ns, json.loads(previous.configurations) if previous else None, items,
                                     rel.id, title, comment, operator, MASTER_NORMAL_RELEASE_MERGE_TO_GRAY)
                self.send_message(s, change, ns.app_id, ns.cluster_name, ns.namespace_name)
            log.info("configcenter.released", app_id=ns.app_id, cluster=ns.cluster_name,
                     namespace=ns.namespace_name, release_id=rel.id, gray=parent is not None, operator=operator)
            return dto.release_dto(rel)

        return self.write(op)

    def rollback(self, release_id: int, to_release_id: int | None, operator: str) -> Change:
        """ReleaseService.rollback / rollbackTo: abandon releases so an earlier one is served again."""

        def op(s: Session, change: Change) -> None:
            rel = s.get(m.Release, release_id)
            if rel is None:
                raise NotFound("release not found for releaseId:%s", release_id)
            if rel.is_abandoned:
                raise BadRequest("release is not active")
            active = list(s.scalars(select(m.Release).where(
                m.Release.app_id == rel.app_id, m.Release.cluster_name == rel.cluster_name,
                m.Release.namespace_name == rel.namespace_name, m.Release.is_abandoned.is_(False),
            ).order_by(m.Release.id.desc())))
            if to_release_id is not None:
                if to_release_id == release_id:
                    raise BadRequest("current release equal to target release")
                target = s.get(m.Release, to_release_id)
                if target is None:
                    raise NotFound("release not found for releaseId:%s", to_release_id)
                if target.is_abandoned:
                    raise BadRequest("release is not active")
                if (target.app_id.lower(), target.cluster_name.lower(), target.namespace_name.lower()) != (
                        rel.app_id.lower(), rel.cluster_name.lower(), rel.namespace_name.lower()):
                    raise BadRequest("target release %s is not a release of the same namespace", to_release_id)
                for r in active:
                    if target.id < r.id <= rel.id:
                        r.is_abandoned = True
                        r.modified_by = operator
                new_latest: m.Release | None = target
            else:
                if len(active) < 2:
                    raise BadRequest("Can't rollback namespace(appId=%s, clusterName=%s, namespaceName=%s) because "
                                     "there is only one active release", rel.app_id, rel.cluster_name,
                                     rel.namespace_name)
                rel.is_abandoned = True
                rel.modified_by = operator
                new_latest = next((r for r in active if not r.is_abandoned), None)
            s.flush()
            self._history(s, rel.app_id, rel.cluster_name, rel.namespace_name, rel.cluster_name,
                          new_latest.id if new_latest else 0, rel.id, ROLLBACK, operator)
            ns = s.scalar(select(m.Namespace).where(m.Namespace.app_id == rel.app_id,
                                                    m.Namespace.cluster_name == rel.cluster_name,
                                                    m.Namespace.namespace_name == rel.namespace_name))
            parent = self.parent_namespace(s, ns) if ns is not None else None
            if parent is not None:
                # A gray release rolled back: the rule now points at the branch's previous release.
                rule = self._rule(s, parent, rel.cluster_name)
                if rule is not None:
                    latest = self.latest_release(s, rel.app_id, rel.cluster_name, rel.namespace_name)
                    rule.release_id = latest.id if latest else 0
                self.send_message(s, change, parent.app_id, parent.cluster_name, parent.namespace_name)
            else:
                if ns is not None and new_latest is not None:
                    self._remerge_branch(s, ns, json.loads(rel.configurations), json.loads(new_latest.configurations),
                                         new_latest.id, datetime.now().strftime("%Y%m%d%H%M%S")
                                         + "-master-rollback-merge-to-gray", "", operator,
                                         MASTER_ROLLBACK_MERGE_TO_GRAY)
                self.send_message(s, change, rel.app_id, rel.cluster_name, rel.namespace_name)
            log.info("configcenter.rolled_back", release_id=release_id, to_release_id=to_release_id,
                     operator=operator)

        return self.write(op)

    # ------------------------------------------------------------------------------------------
    # gray release branches
    # ------------------------------------------------------------------------------------------
    def create_branch(self, app_id: str, cluster: str, namespace: str, operator: str) -> Change:
        def op(s: Session, change: Change) -> dict[str, Any]:
            try:
                parent = self.namespace(s, app_id, cluster, namespace)
            except NotFound:
                raise BadRequest("namespace not exist for appId:%s clusterName:%s namespaceName:%s",
                                 app_id, cluster, namespace) from None
            if self.child_namespace(s, app_id, cluster, namespace) is not None:
                raise BadRequest("namespace branch already exists for appId:%s clusterName:%s namespaceName:%s",
                                 app_id, cluster, namespace)
            parent_cluster = self.cluster(s, app_id, cluster)
            if parent_cluster.parent_cluster_id:
                raise BadRequest("cluster not exists for clusterName:%s", cluster)
            branch = m.Cluster(app_id=parent.app_id, name=unique_key(), parent_cluster_id=parent_cluster.id,
                               created_by=operator, modified_by=operator)
            s.add(branch)
            child = m.Namespace(app_id=parent.app_id, cluster_name=branch.name,
                                namespace_name=parent.namespace_name, created_by=operator, modified_by=operator)
            s.add(child)
            s.flush()
            change.touched.add((parent.app_id, parent.namespace_name))
            log.info("configcenter.branch_created", app_id=app_id, cluster=cluster, namespace=namespace,
                     branch=branch.name)
            return dto.namespace_dto(child, self.app_namespace(s, parent.app_id, parent.namespace_name), [])

        return self.write(op)

    def update_rules(self, app_id: str, cluster: str, namespace: str, branch: str,
                     rule_items: list[dict[str, Any]], operator: str) -> Change:
        def op(s: Session, change: Change) -> None:
            parent, child = self.branch(s, app_id, cluster, namespace, branch)
            latest = self.latest_release(s, child.app_id, child.cluster_name, child.namespace_name)
            rule = self._rule(s, parent, child.cluster_name)
            old = rule.rules if rule is not None else None
            if rule is None:
                rule = m.GrayReleaseRule(app_id=parent.app_id, cluster_name=parent.cluster_name,
                                         namespace_name=parent.namespace_name, branch_name=child.cluster_name,
                                         created_by=operator)
                s.add(rule)
            rule.rules = json.dumps(rule_items)
            rule.release_id = latest.id if latest else 0
            rule.branch_status = BRANCH_ACTIVE
            rule.modified_by = operator
            self._history(s, parent.app_id, parent.cluster_name, parent.namespace_name, child.cluster_name,
                          rule.release_id, rule.release_id, APPLY_GRAY_RULES, operator,
                          {"rules": rule_items, "oldRules": json.loads(old) if old else None})
            self.send_message(s, change, parent.app_id, parent.cluster_name, parent.namespace_name)

        return self.write(op)

    def _delete_branch(self, s: Session, change: Change, parent: m.Namespace, child: m.Namespace, status: int,
                       operator: str) -> None:
        latest = self.latest_release(s, child.app_id, child.cluster_name, child.namespace_name)
        rule = self._rule(s, parent, child.cluster_name)
        if rule is None:
            rule = m.GrayReleaseRule(app_id=parent.app_id, cluster_name=parent.cluster_name,
                                     namespace_name=parent.namespace_name, branch_name=child.cluster_name,
                                     created_by=operator)
            s.add(rule)
        rule.rules = "[]"
        rule.branch_status = status
        rule.release_id = latest.id if latest else 0
        rule.modified_by = operator
        branch_cluster = s.scalar(select(m.Cluster).where(m.Cluster.app_id == child.app_id,
                                                          m.Cluster.name == child.cluster_name))
        s.execute(delete(m.Item).where(m.Item.namespace_id == child.id))
        s.delete(child)
        if branch_cluster is not None:
            s.delete(branch_cluster)
        operation = GRAY_RELEASE_DELETED_AFTER_MERGE if status == BRANCH_MERGED else ABANDON_GRAY_RELEASE
        self._history(s, parent.app_id, parent.cluster_name, parent.namespace_name, child.cluster_name,
                      rule.release_id, rule.release_id, operation, operator)
        change.touched.add((parent.app_id, parent.namespace_name))

    def delete_branch(self, app_id: str, cluster: str, namespace: str, branch: str, operator: str) -> Change:
        """Abandon a gray release: rules emptied, branch cluster deleted, clients fall back to master."""

        def op(s: Session, change: Change) -> None:
            parent, child = self.branch(s, app_id, cluster, namespace, branch)
            self._delete_branch(s, change, parent, child, BRANCH_DELETED, operator)
            self.send_message(s, change, parent.app_id, parent.cluster_name, parent.namespace_name)
            log.info("configcenter.branch_abandoned", app_id=app_id, cluster=cluster, namespace=namespace,
                     branch=branch, operator=operator)

        return self.write(op)

    def merge(self, app_id: str, cluster: str, namespace: str, branch: str, delete_branch: bool, title: str,
              comment: str, operator: str) -> Change:
        """NamespaceBranchService.merge: branch items folded into master, master published."""

        def op(s: Session, change: Change) -> dict[str, Any]:
            parent, child = self.branch(s, app_id, cluster, namespace, branch)
            master_latest = self.latest_release(s, parent.app_id, parent.cluster_name, parent.namespace_name)
            master_items = self.item_map(s, parent)
            released = json.loads(master_latest.configurations) if master_latest else {}
            if master_items != released:
                raise BadRequest("Merge operation failed. Because master has modified items")
            existing = {i.key: i for i in self.items(s, parent)}
            line = max((i.line_num for i in existing.values()), default=0)
            for item in self.items(s, child):
                if not item.key:
                    continue
                target = existing.get(item.key)
                if target is None:
                    line += 1
                    s.add(m.Item(namespace_id=parent.id, key=item.key, value=item.value, comment=item.comment,
                                 type=item.type, line_num=line, created_by=operator, modified_by=operator))
                elif target.value != item.value:
                    target.value = item.value
                    target.modified_by = operator
            s.flush()
            branch_latest = self.latest_release(s, child.app_id, child.cluster_name, child.namespace_name)
            rel = self._master_release(s, parent, title, comment, self.item_map(s, parent), operator,
                                       GRAY_RELEASE_MERGE_TO_MASTER,
                                       {"sourceBranch": child.cluster_name,
                                        "baseReleaseId": branch_latest.id if branch_latest else 0})
            if delete_branch:
                self._delete_branch(s, change, parent, child, BRANCH_MERGED, operator)
            self.send_message(s, change, parent.app_id, parent.cluster_name, parent.namespace_name)
            log.info("configcenter.branch_merged", app_id=app_id, cluster=cluster, namespace=namespace,
                     branch=branch, release_id=rel.id, operator=operator)
            return dto.release_dto(rel)

        return self.write(op)


def _release_view(rel: m.Release) -> ReleaseView:
    return ReleaseView(rel.id, rel.release_key, rel.app_id, rel.cluster_name, rel.namespace_name,
                       json.loads(rel.configurations))
