"""Writes of apps, clusters, namespaces, items and credentials (Apollo's portal / admin-service logic)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import structlog
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from . import dto, locked
from . import models as m
from .errors import BadRequest, NotFound
from .readmodel import CLUSTER_DEFAULT, NAMESPACE_APPLICATION
from .storage import ACCESS_KEY_FILTER, ACCESS_KEY_LIMIT, Change, StoreBase

log = structlog.get_logger(__name__)


class ConfigWrites(StoreBase):
    """Everything that changes what is edited, not yet what is served (that needs a release)."""

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

        try:
            return str(self.write(op).result)
        except IntegrityError:  # another instance on the same database seeded it at the same moment
            return str(self.write(op).result)

    def add_access_key(self, app_id: str, secret: str | None = None, operator: str = "apollo") -> str:
        """Add an enabled, enforced access-key secret to an app (32 hex chars, like Apollo's); returns it."""
        value = secret or secrets.token_hex(16)
        self.write(lambda s, change: self._new_access_key(s, change, app_id, value, True, operator))
        return value

    @staticmethod
    def _new_access_key(s: Session, change: Change, app_id: str, secret: str, enabled: bool,
                        operator: str) -> dict[str, Any]:
        count = s.scalar(select(func.count(m.AccessKey.id)).where(m.AccessKey.app_id == app_id,
                                                                   m.AccessKey.owner.is_(None))) or 0
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

    def put_app_key(self, app_id: str, owner: str, secret: str, scope: str, operator: str) -> Change:
        """Set the per-app key of ykafka app ``owner`` under Apollo app ``app_id`` (keyscope.py): its secret and
        scope replace any earlier one at once (a rotation retires the old secret in the same write)."""

        def op(s: Session, change: Change) -> None:
            app = self.app(s, app_id)
            key = s.scalar(select(m.AccessKey).where(m.AccessKey.app_id == app.app_id, m.AccessKey.owner == owner))
            if key is None:
                key = m.AccessKey(app_id=app.app_id, owner=owner, mode=ACCESS_KEY_FILTER, created_by=operator)
                s.add(key)
            key.secret, key.scope, key.enabled, key.modified_by = secret, scope, True, operator
            change.credentials_changed = True

        return self.write(op)

    def delete_app_key(self, app_id: str, owner: str, operator: str) -> Change:
        """Retire ykafka app ``owner``'s per-app key (disabled, deleted or rotated app); absent is fine."""

        def op(s: Session, change: Change) -> None:
            for key in s.scalars(select(m.AccessKey).where(m.AccessKey.app_id == app_id, m.AccessKey.owner == owner)):
                s.delete(key)
                change.credentials_changed = True
                log.info("configcenter.app_key_deleted", app_id=app_id, owner=owner, operator=operator)

        return self.write(op)

    def app_keys(self, s: Session, app_id: str) -> dict[str, str]:
        """The per-app keys of Apollo app ``app_id``: owner -> scope (never the secrets)."""
        return {str(k.owner): str(k.scope or "") for k in s.scalars(
            select(m.AccessKey).where(m.AccessKey.app_id == app_id, m.AccessKey.owner.is_not(None)))}

    def update_access_key(self, app_id: str, key_id: int, enabled: bool, mode: int, operator: str) -> Change:
        def op(s: Session, change: Change) -> None:
            key = s.scalar(select(m.AccessKey).where(m.AccessKey.app_id == app_id, m.AccessKey.id == key_id,
                                                     m.AccessKey.owner.is_(None)))
            if key is None:
                raise BadRequest("accessKey not exist.")
            key.enabled, key.mode, key.modified_by = enabled, mode, operator
            change.credentials_changed = True

        return self.write(op)

    def delete_access_key(self, app_id: str, key_id: int, operator: str) -> Change:
        def op(s: Session, change: Change) -> None:
            key = s.scalar(select(m.AccessKey).where(m.AccessKey.app_id == app_id, m.AccessKey.id == key_id,
                                                     m.AccessKey.owner.is_(None)))
            if key is None:
                raise BadRequest("accessKey not exist.")
            if key.enabled:
                raise BadRequest("AccessKey should disable first")
            s.delete(key)
            change.credentials_changed = True
            log.info("configcenter.accesskey_deleted", app_id=app_id, id=key_id, operator=operator)

        return self.write(op)

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
            locked.check(ns.namespace_name, (key,))
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
            locked.check(ns.namespace_name, (key,))
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
