"""Releases, gray-release branches and rollbacks (Apollo's ReleaseService / NamespaceBranchService).

A branch (gray) release is the parent's latest release plus the branch items; a master release or rollback
re-applies the branch's keys on top of the new master values; merge folds branch items into master and
publishes it. Every operation records history and a release message that wakes the namespace's polls.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from . import dto, locked
from . import models as m
from .errors import BadRequest, NotFound
from .storage import BRANCH_ACTIVE, BRANCH_DELETED, BRANCH_MERGED, Change, StoreBase, unique_key

log = structlog.get_logger(__name__)

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


class ReleaseWrites(StoreBase):
    """Publishing, gray branches (rules, merge, abandon) and rollback."""

    # ------------------------------------------------------------------------------------------
    # release machinery
    # ------------------------------------------------------------------------------------------
    @staticmethod
    def _history(s: Session, app_id: str, cluster: str, namespace: str, branch: str, release_id: int,
                 previous_id: int, operation: int, operator: str, context: dict[str, Any] | None = None) -> None:
        s.add(m.ReleaseHistory(app_id=app_id, cluster_name=cluster, namespace_name=namespace, branch_name=branch,
                               release_id=release_id, previous_release_id=previous_id, operation=operation,
                               operation_context=json.dumps(context or {}), created_by=operator))

    @staticmethod
    def _create_release(s: Session, ns: m.Namespace, name: str, comment: str, configurations: dict[str, str],
                        operator: str, branch_keys: Iterable[str] | None = None) -> m.Release:
        locked.check(ns.namespace_name, configurations)  # every release, master or gray, passes here
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
    # releases
    # ------------------------------------------------------------------------------------------
    def publish(self, app_id: str, cluster: str, namespace: str, title: str, comment: str,
                operator: str, gray_del_keys: Iterable[str] = ()) -> Change:
        """ReleaseService.publish: a master release (re-merging any branch) or, for a branch, a gray one;
        ``gray_del_keys`` (a gray deletion release) are left out of the branch's release."""
        dropped = set(gray_del_keys)

        def op(s: Session, change: Change) -> dict[str, Any]:
            ns = self.namespace(s, app_id, cluster, namespace)
            items = self.item_map(s, ns)
            parent = self.parent_namespace(s, ns)
            if parent is not None:
                parent_latest = self.latest_release(s, parent.app_id, parent.cluster_name, parent.namespace_name)
                base = json.loads(parent_latest.configurations) if parent_latest else {}
                configs = {k: v for k, v in {**base, **items}.items() if k not in dropped}
                rel = self._branch_release(s, parent, ns, title, comment, configs,
                                           parent_latest.id if parent_latest else 0, operator, GRAY_RELEASE,
                                           items.keys())
                self.send_message(s, change, parent.app_id, parent.cluster_name, parent.namespace_name)
            elif dropped:
                raise BadRequest("Gray deletion release is only for a branch: %s is not one", ns.cluster_name)
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
