"""Open API JSON shapes (apollo-openapi `Open*DTO`), rendered from rows so scripts for Apollo parse ours."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from . import models as m


def fmt_time(value: datetime | None) -> str | None:
    """Apollo's `yyyy-MM-dd'T'HH:mm:ss.SSSZ`, e.g. 2016-08-11T14:03:46.232+0800."""
    if value is None:
        return None
    aware = value.astimezone() if value.tzinfo is None else value
    return aware.strftime("%Y-%m-%dT%H:%M:%S.") + f"{aware.microsecond // 1000:03d}" + aware.strftime("%z")


def _audit(row: Any) -> dict[str, Any]:
    return {
        "dataChangeCreatedBy": row.created_by,
        "dataChangeLastModifiedBy": row.modified_by,
        "dataChangeCreatedTime": fmt_time(row.created_at),
        "dataChangeLastModifiedTime": fmt_time(row.modified_at),
    }


def app_dto(app: m.App) -> dict[str, Any]:
    return {
        "name": app.name, "appId": app.app_id, "orgId": app.org_id, "orgName": app.org_name,
        "ownerName": app.owner_name, "ownerEmail": app.owner_email, **_audit(app),
    }


def cluster_dto(cluster: m.Cluster) -> dict[str, Any]:
    return {"name": cluster.name, "appId": cluster.app_id, "id": cluster.id,
            "parentClusterId": cluster.parent_cluster_id, "comment": cluster.comment, **_audit(cluster)}


def item_dto(item: m.Item) -> dict[str, Any]:
    return {"key": item.key, "value": item.value, "type": item.type, "comment": item.comment,
            "lineNum": item.line_num, **_audit(item)}


def app_namespace_dto(ans: m.AppNamespace) -> dict[str, Any]:
    return {"name": ans.name, "appId": ans.app_id, "format": ans.format, "isPublic": ans.is_public,
            "comment": ans.comment, **_audit(ans)}


def namespace_dto(ns: m.Namespace, ans: m.AppNamespace | None, items: Iterable[m.Item] | None) -> dict[str, Any]:
    return {
        "appId": ns.app_id, "clusterName": ns.cluster_name, "namespaceName": ns.namespace_name,
        "comment": ans.comment if ans else "", "format": ans.format if ans else "properties",
        "isPublic": bool(ans.is_public) if ans else False,
        "items": [item_dto(i) for i in items] if items is not None else [],
        **_audit(ns),
    }


def release_dto(rel: m.Release) -> dict[str, Any]:
    return {
        "id": rel.id, "appId": rel.app_id, "clusterName": rel.cluster_name, "namespaceName": rel.namespace_name,
        "name": rel.name, "configurations": json.loads(rel.configurations), "comment": rel.comment,
        "releaseKey": rel.release_key, "isAbandoned": rel.is_abandoned, **_audit(rel),
    }


def gray_rule_dto(rule: m.GrayReleaseRule) -> dict[str, Any]:
    items = json.loads(rule.rules or "[]")
    return {
        "appId": rule.app_id, "clusterName": rule.cluster_name, "namespaceName": rule.namespace_name,
        "branchName": rule.branch_name, "releaseId": rule.release_id,
        "ruleItems": [{"clientAppId": i.get("clientAppId", ""), "clientIpList": list(i.get("clientIpList") or []),
                       "clientLabelList": list(i.get("clientLabelList") or [])} for i in items],
        **_audit(rule),
    }


def access_key_dto(key: m.AccessKey) -> dict[str, Any]:
    return {"id": key.id, "appId": key.app_id, "secret": key.secret, "mode": key.mode, "enabled": key.enabled,
            **_audit(key)}
