"""Open API: apps, envs, clusters, app namespaces and namespaces."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from .. import dto
from .. import models as m
from ..errors import BadRequest, NotFound
from ..readmodel import TokenView
from ..store import Store
from .common import (
    APP_NAMESPACE_NAME,
    CLUSTER_NAMESPACE_NAME,
    DEFAULT_ENV,
    FORMATS,
    INVALID_NAME,
    NS,
    RESERVED_SUFFIX,
    OpenAppNamespaceIn,
    OpenClusterIn,
    OpenCreateAppIn,
    allow,
    center_of,
    consumer,
    empty,
    operator_of,
    read,
)

router = APIRouter(prefix="/openapi/v1")


# ----------------------------------------------------------------------------------------------
# apps, envs, clusters, app namespaces
# ----------------------------------------------------------------------------------------------
@router.post("/apps")
async def create_app(request: Request, body: OpenCreateAppIn, token: TokenView = Depends(consumer)) -> Response:
    """AppController.createApp: creates the app with cluster `default` and namespace `application`."""
    if body.app is None:
        raise BadRequest("App is null")
    app = body.app
    if not app.appId or not app.appId.strip():
        raise BadRequest("AppId is null or blank")
    if not CLUSTER_NAMESPACE_NAME.match(app.appId):
        raise BadRequest("Invalid AppId format: %s", INVALID_NAME)
    if not app.name or not app.name.strip():
        raise BadRequest("app name can not be blank")
    operator = operator_of(app.dataChangeCreatedBy, app.ownerName or (body.admins[0] if body.admins else None))
    fields = {k: v for k, v in app.model_dump().items() if isinstance(v, str)}
    grant = token.token if body.assignAppRoleToSelf else None
    await center_of(request).write(center_of(request).store.create_app, fields, body.admins or [], operator, grant)
    return empty()


@router.get("/apps")
async def find_apps(request: Request, appIds: str | None = None,
                    _: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    wanted = [a.strip().lower() for a in appIds.split(",") if a.strip()] if appIds else None

    def q(s: Session) -> list[dict[str, Any]]:
        rows = s.scalars(select(m.App).order_by(m.App.id)).all()
        return [dto.app_dto(a) for a in rows if wanted is None or a.app_id.lower() in wanted]

    result: list[dict[str, Any]] = await read(request, q)
    return result


@router.get("/apps/authorized")
async def find_apps_authorized(request: Request, token: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    def q(s: Session) -> list[dict[str, Any]]:
        return [dto.app_dto(a) for a in s.scalars(select(m.App).order_by(m.App.id)) if token.may_manage(a.app_id)]

    result: list[dict[str, Any]] = await read(request, q)
    return result


@router.get("/apps/by-self")
async def find_apps_by_self(request: Request, page: int = Query(default=0, ge=0),
                            size: int = Query(default=20, ge=1, le=500),
                            token: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    """AppController.getAppsBySelf: the apps this token may manage, one page (``page`` from 0, ``size``)."""
    def q(s: Session) -> list[dict[str, Any]]:
        apps = [dto.app_dto(a) for a in s.scalars(select(m.App).order_by(m.App.id)) if token.may_manage(a.app_id)]
        return apps[page * size:(page + 1) * size]

    result: list[dict[str, Any]] = await read(request, q)
    return result


@router.get("/organizations")
async def find_organizations(request: Request, _: TokenView = Depends(consumer)) -> list[dict[str, str]]:
    """OrganizationController.loadOrganization: ``[{orgId, orgName}]``; this service has no organization
    settings, so the organizations are those its apps name."""
    def q(s: Session) -> list[dict[str, str]]:
        rows = s.execute(select(m.App.org_id, m.App.org_name).distinct().order_by(m.App.org_id)).all()
        return [{"orgId": org_id, "orgName": org_name or org_id} for org_id, org_name in rows if org_id]

    result: list[dict[str, str]] = await read(request, q)
    return result


@router.get("/apps/{app_id}")
async def get_app(request: Request, app_id: str, _: TokenView = Depends(consumer)) -> dict[str, Any]:
    def q(s: Session) -> dict[str, Any]:
        app = s.scalar(select(m.App).where(m.App.app_id == app_id))
        if app is None:
            raise BadRequest("App not found: %s", app_id)
        return dto.app_dto(app)

    result: dict[str, Any] = await read(request, q)
    return result


@router.get("/apps/{app_id}/envclusters")
async def env_clusters(request: Request, app_id: str, _: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    def q(s: Session) -> list[dict[str, Any]]:
        Store.app(s, app_id)
        names = [c.name for c in s.scalars(select(m.Cluster).where(m.Cluster.app_id == app_id,
                                                                    m.Cluster.parent_cluster_id == 0)
                                           .order_by(m.Cluster.id))]
        return [{"env": DEFAULT_ENV, "clusters": names}]

    result: list[dict[str, Any]] = await read(request, q)
    return result


@router.get("/envs")
async def envs(_: TokenView = Depends(consumer)) -> list[str]:
    return [DEFAULT_ENV]


@router.post("/apps/{app_id}/appnamespaces")
async def create_app_namespace(request: Request, app_id: str, body: OpenAppNamespaceIn,
                               operator: str | None = None, token: TokenView = Depends(consumer)) -> dict[str, Any]:
    """NamespaceController.createAppNamespace: the namespace exists in every cluster of the app."""
    allow(token, app_id)
    if body.appId != app_id:
        raise BadRequest("AppId not equal. AppId in path = %s, AppId in payload = %s", app_id, body.appId)
    if not body.name or not body.format:
        raise BadRequest("name and format can not be empty")
    if not APP_NAMESPACE_NAME.match(body.name) or RESERVED_SUFFIX.search(body.name):
        raise BadRequest("invalid namespace format:%s & %s", INVALID_NAME,
                         "not allowed to end with .json, .yml, .yaml, .xml, .properties")
    if body.format not in FORMATS:
        raise BadRequest("invalid namespace format:%s", body.format)
    if body.comment and len(body.comment) > 64:
        raise BadRequest("comment length should not exceed 64 characters")
    who = operator_of(operator, body.dataChangeCreatedBy)
    center = center_of(request)
    result: dict[str, Any] = await center.write(
        center.store.create_app_namespace, app_id, body.name, body.format, bool(body.isPublic),
        body.appendNamespacePrefix is not False, body.comment or "", who)
    return result


@router.get("/apps/{app_id}/appnamespaces")
async def list_app_namespaces(request: Request, app_id: str, _: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    def q(s: Session) -> list[dict[str, Any]]:
        Store.app(s, app_id)
        rows = s.scalars(select(m.AppNamespace).where(m.AppNamespace.app_id == app_id).order_by(m.AppNamespace.id))
        return [dto.app_namespace_dto(r) for r in rows]

    result: list[dict[str, Any]] = await read(request, q)
    return result


@router.get("/apps/{app_id}/appnamespaces/{namespace}")
async def get_app_namespace(request: Request, app_id: str, namespace: str,
                            _: TokenView = Depends(consumer)) -> dict[str, Any]:
    def q(s: Session) -> dict[str, Any]:
        Store.app(s, app_id)
        row = s.scalar(select(m.AppNamespace).where(m.AppNamespace.app_id == app_id,
                                                    m.AppNamespace.name == namespace))
        if row is None:
            raise NotFound("appNamespace not exist for appId:%s namespaceName:%s", app_id, namespace)
        return dto.app_namespace_dto(row)

    result: dict[str, Any] = await read(request, q)
    return result


@router.get("/envs/{env}/apps/{app_id}/clusters/{cluster}")
async def get_cluster(request: Request, env: str, app_id: str, cluster: str,
                      _: TokenView = Depends(consumer)) -> dict[str, Any]:
    result: dict[str, Any] = await read(request, lambda s: dto.cluster_dto(Store.cluster(s, app_id, cluster)))
    return result


@router.post("/envs/{env}/apps/{app_id}/clusters")
async def create_cluster(request: Request, env: str, app_id: str, body: OpenClusterIn,
                         operator: str | None = None, token: TokenView = Depends(consumer)) -> dict[str, Any]:
    allow(token, app_id)
    if not body.name or body.appId is None:
        raise BadRequest("name and appId can not be empty")
    if body.appId != app_id:
        raise BadRequest("AppId not equal. AppId in path = %s, AppId in payload = %s", app_id, body.appId)
    if not CLUSTER_NAMESPACE_NAME.match(body.name):
        raise BadRequest("invalid clusterName format:%s", INVALID_NAME)
    who = operator_of(operator, body.dataChangeCreatedBy)
    center = center_of(request)
    result: dict[str, Any] = await center.write(center.store.create_cluster, app_id, body.name, who)
    return result


# ----------------------------------------------------------------------------------------------
# namespaces
# ----------------------------------------------------------------------------------------------
def namespace_view(s: Session, ns: m.Namespace, fill: bool) -> dict[str, Any]:
    return dto.namespace_dto(ns, Store.app_namespace(s, ns.app_id, ns.namespace_name),
                             Store.items(s, ns) if fill else None)


@router.get("/envs/{env}/apps/{app_id}/clusters/{cluster}/namespaces")
async def find_namespaces(request: Request, env: str, app_id: str, cluster: str, fillItemDetail: bool = True,
                          _: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    def q(s: Session) -> list[dict[str, Any]]:
        Store.cluster(s, app_id, cluster)
        rows = s.scalars(select(m.Namespace).where(m.Namespace.app_id == app_id, m.Namespace.cluster_name == cluster)
                         .order_by(m.Namespace.id))
        return [namespace_view(s, ns, fillItemDetail) for ns in rows]

    result: list[dict[str, Any]] = await read(request, q)
    return result


@router.get(NS)
async def find_namespace(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                         fillItemDetail: bool = True, _: TokenView = Depends(consumer)) -> dict[str, Any]:
    result: dict[str, Any] = await read(
        request, lambda s: namespace_view(s, Store.namespace(s, app_id, cluster, namespace), fillItemDetail))
    return result


@router.get(NS + "/lock")
async def namespace_lock(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                         _: TokenView = Depends(consumer)) -> dict[str, Any]:
    """No edit locks here (Apollo only locks when namespace.lock.switch is on)."""
    await read(request, lambda s: Store.namespace(s, app_id, cluster, namespace))
    return {"namespaceName": namespace, "isLocked": False}
