"""Open API: who holds which release (Apollo's instance views over Instance / InstanceConfig).

Both Apollo path families are served: the portal's ``/envs/{env}/instances/by-release`` /
``by-namespace`` / ``by-namespace-and-releases-not-in`` / ``by-namespace/count`` (under ``/openapi/v1``)
and apollo-openapi's ``/envs/{env}/releases/{releaseId}/instances``, ``.../namespaces/{ns}/instances``
(a count) and ``.../namespaces/{ns}/instances_not_in?excludeReleases=``. Only records seen within the
retention (a day) are listed, as Apollo's valid-date filter does.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from .. import dto
from .. import models as m
from ..errors import BadRequest, NotFound
from ..readmodel import TokenView
from .common import MAX_ID, NS, Page, ReleaseId, center_of, consumer, read

router = APIRouter(prefix="/openapi/v1")
Size = Query(20, ge=1, le=500)


def _valid_after(request: Request) -> datetime:
    return datetime.now() - center_of(request).instances.retention


def _instance_dtos(s: Session, configs: Sequence[m.InstanceConfig]) -> list[dict[str, Any]]:
    """InstanceDTO: the instance with the configs listed (each with its release, when still stored)."""
    ids = list(dict.fromkeys(c.instance_id for c in configs))
    instances = {i.id: i for i in s.scalars(select(m.Instance).where(m.Instance.id.in_(ids)))}
    keys = {c.release_key for c in configs}
    releases = {r.release_key: r for r in s.scalars(select(m.Release).where(m.Release.release_key.in_(keys)))}
    out: dict[int, dict[str, Any]] = {}
    for c in configs:
        inst = instances.get(c.instance_id)
        if inst is None:
            continue
        view = out.setdefault(inst.id, {
            "id": inst.id, "appId": inst.app_id, "clusterName": inst.cluster_name, "dataCenter": inst.data_center,
            "ip": inst.ip, "configs": [], "dataChangeCreatedTime": dto.fmt_time(inst.created_at)})
        rel = releases.get(c.release_key)
        view["configs"].append({
            "release": dto.release_dto(rel) if rel is not None else {"releaseKey": c.release_key},
            "releaseDeliveryTime": dto.fmt_time(c.release_delivered_at),
            "dataChangeLastModifiedTime": dto.fmt_time(c.modified_at)})
    return [out[i] for i in ids if i in out]


def _page(s: Session, stmt: Select[Any], page: int, size: int) -> dict[str, Any]:
    """PageDTO over instances: ``{content, page, size, total}``, ``total`` counting instances."""
    rows = s.scalars(stmt.order_by(m.InstanceConfig.instance_id, m.InstanceConfig.id)).all()
    instance_ids = list(dict.fromkeys(c.instance_id for c in rows))
    wanted = set(instance_ids[page * size:(page + 1) * size])
    content = _instance_dtos(s, [c for c in rows if c.instance_id in wanted])
    return {"content": content, "page": page, "size": size, "total": len(instance_ids)}


def _of_namespace(app_id: str, cluster: str, namespace: str, after: datetime) -> Select[Any]:
    return select(m.InstanceConfig).where(
        m.InstanceConfig.config_app_id == app_id, m.InstanceConfig.config_cluster_name == cluster,
        m.InstanceConfig.config_namespace_name == namespace, m.InstanceConfig.modified_at > after)


def _release_keys(s: Session, ids: list[int]) -> set[str]:
    keys = set(s.scalars(select(m.Release.release_key).where(m.Release.id.in_(ids))))
    if len(keys) != len(set(ids)):
        raise NotFound("release not found: %s", ",".join(str(i) for i in ids))
    return keys


def _ids(raw: str, name: str) -> list[int]:
    try:
        ids = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise BadRequest("%s must be release ids separated by commas", name) from None
    if not ids or any(not 1 <= i <= MAX_ID for i in ids):
        raise BadRequest("%s must be release ids separated by commas", name)
    return ids


# --- by release --------------------------------------------------------------------------------------
async def _by_release(request: Request, release_id: int, page: int, size: int) -> dict[str, Any]:
    after = _valid_after(request)

    def q(s: Session) -> dict[str, Any]:
        rel = s.get(m.Release, release_id)
        if rel is None:
            raise NotFound("release not found: %s", release_id)
        stmt = select(m.InstanceConfig).where(m.InstanceConfig.release_key == rel.release_key,
                                              m.InstanceConfig.modified_at > after)
        return _page(s, stmt, page, size)

    result: dict[str, Any] = await read(request, q)
    return result


@router.get("/envs/{env}/instances/by-release")
async def instances_by_release(request: Request, env: str, releaseId: int = Query(ge=1, le=MAX_ID),  # noqa: N803
                               page: int = Page, size: int = Size,
                               _: TokenView = Depends(consumer)) -> dict[str, Any]:
    """InstanceController.getByRelease: the instances that hold this release, one page."""
    return await _by_release(request, releaseId, page, size)


@router.get("/envs/{env}/releases/{release_id}/instances")
async def release_instances(request: Request, env: str, release_id: int = ReleaseId, page: int = Page,
                            size: int = Size, _: TokenView = Depends(consumer)) -> dict[str, Any]:
    """apollo-openapi getByRelease: the same page under the release's path."""
    return await _by_release(request, release_id, page, size)


# --- by namespace ------------------------------------------------------------------------------------
@router.get("/envs/{env}/instances/by-namespace")
async def instances_by_namespace(request: Request, env: str, appId: str, clusterName: str,  # noqa: N803
                                 namespaceName: str, instanceAppId: str | None = None,  # noqa: N803
                                 page: int = Page, size: int = Size,
                                 _: TokenView = Depends(consumer)) -> dict[str, Any]:
    """InstanceController.getByNamespace: instances holding any release of the namespace (optionally only
    those of ``instanceAppId``, for a public namespace), one page."""
    after = _valid_after(request)

    def q(s: Session) -> dict[str, Any]:
        stmt = _of_namespace(appId, clusterName, namespaceName, after)
        if instanceAppId:
            stmt = stmt.where(m.InstanceConfig.instance_id.in_(
                select(m.Instance.id).where(m.Instance.app_id == instanceAppId)))
        return _page(s, stmt, page, size)

    result: dict[str, Any] = await read(request, q)
    return result


async def _count(request: Request, app_id: str, cluster: str, namespace: str) -> int:
    after = _valid_after(request)

    def q(s: Session) -> int:
        sub = _of_namespace(app_id, cluster, namespace, after).subquery()
        return int(s.scalar(select(func.count(func.distinct(sub.c.instance_id)))) or 0)

    result: int = await read(request, q)
    return result


@router.get("/envs/{env}/instances/by-namespace/count")
async def instance_count(request: Request, env: str, appId: str, clusterName: str,  # noqa: N803
                         namespaceName: str, _: TokenView = Depends(consumer)) -> int:  # noqa: N803
    """InstanceController.getInstanceCountByNamespace."""
    return await _count(request, appId, clusterName, namespaceName)


@router.get(NS + "/instances")
async def namespace_instance_count(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                                   _: TokenView = Depends(consumer)) -> int:
    """apollo-openapi getInstanceCountByNamespace: how many instances hold a release of the namespace."""
    return await _count(request, app_id, cluster, namespace)


# --- excluding releases ------------------------------------------------------------------------------
async def _not_in(request: Request, app_id: str, cluster: str, namespace: str, raw_ids: str,
                  name: str) -> list[dict[str, Any]]:
    ids = _ids(raw_ids, name)
    after = _valid_after(request)

    def q(s: Session) -> list[dict[str, Any]]:
        keys = _release_keys(s, ids)
        stmt = _of_namespace(app_id, cluster, namespace, after).where(m.InstanceConfig.release_key.not_in(keys))
        return _instance_dtos(s, s.scalars(stmt.order_by(m.InstanceConfig.instance_id)).all())

    result: list[dict[str, Any]] = await read(request, q)
    return result


@router.get("/envs/{env}/instances/by-namespace-and-releases-not-in")
async def instances_not_in_releases(request: Request, env: str, appId: str, clusterName: str,  # noqa: N803
                                    namespaceName: str, releaseIds: str,  # noqa: N803
                                    _: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    """InstanceController.getByReleasesNotIn: instances of the namespace that hold none of ``releaseIds``
    (e.g. the latest release: who has not picked it up yet)."""
    return await _not_in(request, appId, clusterName, namespaceName, releaseIds, "releaseIds")


@router.get(NS + "/instances_not_in")
async def namespace_instances_not_in(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                                     excludeReleases: str, _: TokenView = Depends(consumer)  # noqa: N803
                                     ) -> list[dict[str, Any]]:
    """apollo-openapi getByReleasesNotIn."""
    return await _not_in(request, app_id, cluster, namespace, excludeReleases, "excludeReleases")
