"""The subset of Apollo's Open API (portal `/openapi/v1`) the MetaServer and operators' scripts use.

Paths, parameters, validation messages and JSON shapes follow apollo-openapi (v0.3.x) and the portal's
openapi controllers, so a script written for a real Apollo portal works here. Env names in paths are
accepted as given (this service is a single environment). Tokens go in `Authorization`, as in Apollo.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from metaserver.configcenter import dto
from metaserver.configcenter import models as m
from metaserver.configcenter.center import ConfigCenter
from metaserver.configcenter.errors import BadRequest, Forbidden, NotFound, Unauthorized
from metaserver.configcenter.readmodel import TokenView
from metaserver.configcenter.store import Store

DEFAULT_ENV = "DEV"
KEY_MAX = 128
VALUE_MAX_BYTES = 64 * 1024
COMMENT_MAX = 256
TITLE_MAX = 64
FORMATS = ("properties", "xml", "json", "yml", "yaml", "txt")
_CLUSTER_NAMESPACE = re.compile(r"^[0-9a-zA-Z_-]+[0-9a-zA-Z_.-]*$")
_APP_NAMESPACE = re.compile(r"^[a-zA-Z0-9_-]+[a-zA-Z0-9._-]*$")
_RESERVED_SUFFIX = re.compile(r"\.(json|yml|yaml|xml|properties)$")
INVALID_NAME = "Only digits, alphabets and symbol - _ . (except single .) are allowed"


# ----------------------------------------------------------------------------------------------
# request bodies (lenient like Jackson: unknown fields ignored, numbers accepted as strings)
# ----------------------------------------------------------------------------------------------
def _reject_surrogates(value: Any) -> Any:
    """JSON may carry lone UTF-16 surrogates (`"\\ud800"`) that no UTF-8 store can hold: refuse them."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("string is not valid unicode (lone surrogate)") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _reject_surrogates(k)
            _reject_surrogates(v)
    elif isinstance(value, list):
        for v in value:
            _reject_surrogates(v)
    return value


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", coerce_numbers_to_str=True)

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return _reject_surrogates(data)


class OpenAppIn(_Body):
    appId: str | None = None
    name: str | None = None
    orgId: str | None = None
    orgName: str | None = None
    ownerName: str | None = None
    ownerEmail: str | None = None
    dataChangeCreatedBy: str | None = None


class OpenCreateAppIn(_Body):
    app: OpenAppIn | None = None
    admins: list[str] | None = None
    assignAppRoleToSelf: bool | None = None


class OpenAppNamespaceIn(_Body):
    name: str | None = None
    appId: str | None = None
    format: str | None = None
    isPublic: bool | None = None
    appendNamespacePrefix: bool | None = None
    comment: str | None = None
    dataChangeCreatedBy: str | None = None


class OpenClusterIn(_Body):
    name: str | None = None
    appId: str | None = None
    comment: str | None = None
    dataChangeCreatedBy: str | None = None


class OpenItemIn(_Body):
    key: str | None = None
    value: str | None = None
    type: int | None = Field(None, ge=0, le=3)  # Apollo's ItemType: string, number, boolean, json
    comment: str | None = None
    dataChangeCreatedBy: str | None = None
    dataChangeLastModifiedBy: str | None = None


class NamespaceReleaseIn(_Body):
    releaseTitle: str | None = None
    releaseComment: str | None = None
    releasedBy: str | None = None
    isEmergencyPublish: bool | None = None


class OpenGrayReleaseRuleItemIn(_Body):
    clientAppId: str | None = None
    clientIpList: list[str] | None = None
    clientLabelList: list[str] | None = None


class OpenGrayReleaseRuleIn(_Body):
    ruleItems: list[OpenGrayReleaseRuleItemIn] | None = None


# ----------------------------------------------------------------------------------------------
# auth and small helpers
# ----------------------------------------------------------------------------------------------
def _center(request: Request) -> ConfigCenter:
    center: ConfigCenter = request.app.state.center
    return center


async def consumer(request: Request) -> TokenView:
    """ConsumerAuthenticationFilter: the `Authorization` header must be a known Open API token."""
    raw = (request.headers.get("authorization") or "").strip()
    token = raw[7:].strip() if raw.lower().startswith("bearer ") else raw
    center = _center(request)
    view = center.model.credentials.tokens.get(token) if token else None
    if view is None and token:
        # A token created by the CLI a moment ago: refresh once instead of waiting for the rescan.
        center.model.set_credentials(await run_in_threadpool(center.store.load_credentials))
        view = center.model.credentials.tokens.get(token)
    if view is None:
        raise Unauthorized("Unauthorized")
    return view


def _allow(token: TokenView, app_id: str) -> None:
    if not token.may_manage(app_id):
        raise Forbidden("Access is denied")


def _operator(query: str | None, payload: str | None = None) -> str:
    operator = query if query and query.strip() else payload
    if not operator or not operator.strip():
        raise BadRequest("operator should not be null or empty")
    return operator.strip()


def _empty() -> Response:
    return Response(status_code=200)


def _check_item(key: str | None, value: str | None, comment: str | None) -> tuple[str, str]:
    if not key or not key.strip():
        raise BadRequest("key should not be null or empty")
    if value is None:
        raise BadRequest("value should not be null")
    if len(key) > KEY_MAX:
        raise BadRequest("key too long. length limit:%s", KEY_MAX)
    if len(value.encode("utf-8")) > VALUE_MAX_BYTES:
        raise BadRequest("value too long. length limit:%s", VALUE_MAX_BYTES)
    if comment and len(comment) > COMMENT_MAX:
        raise BadRequest("Comment length should not exceed %s characters", COMMENT_MAX)
    return key, value


def _check_release(body: NamespaceReleaseIn, operator: str | None) -> tuple[str, str, str]:
    releaser = operator if operator and operator.strip() else body.releasedBy
    if not body.releaseTitle or not releaser or not releaser.strip():
        raise BadRequest("Params(releaseTitle and releasedBy) can not be empty")
    if len(body.releaseTitle) > TITLE_MAX:
        raise BadRequest("releaseTitle length should not exceed %s characters", TITLE_MAX)
    comment = body.releaseComment or ""
    if len(comment) > COMMENT_MAX:
        raise BadRequest("releaseComment length should not exceed %s characters", COMMENT_MAX)
    return body.releaseTitle, comment, releaser.strip()


def _decode_key(encoded: str) -> str:
    """The key of an `encodedItems` path: standard or URL-safe base64, padding optional."""
    padded = (encoded + "=" * (-len(encoded) % 4)).encode()
    for altchars in (None, b"-_"):
        try:
            key = base64.b64decode(padded, altchars=altchars, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if key:
            return key
    raise BadRequest("Invalid encoded key")


async def _read(request: Request, fn: Any) -> Any:
    store: Store = _center(request).store
    return await run_in_threadpool(store.read, fn)


router = APIRouter(prefix="/openapi/v1")
NS = "/envs/{env}/apps/{app_id}/clusters/{cluster}/namespaces/{namespace}"
MAX_ID = 2**63 - 1
Page = Query(0, ge=0, le=1_000_000)
ReleaseId = Path(ge=1, le=MAX_ID)
BRANCH = NS + "/branches/{branch}"


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
    if not _CLUSTER_NAMESPACE.match(app.appId):
        raise BadRequest("Invalid AppId format: %s", INVALID_NAME)
    if not app.name or not app.name.strip():
        raise BadRequest("app name can not be blank")
    operator = _operator(app.dataChangeCreatedBy, app.ownerName or (body.admins[0] if body.admins else None))
    fields = {k: v for k, v in app.model_dump().items() if isinstance(v, str)}
    grant = token.token if body.assignAppRoleToSelf else None
    await _center(request).write(_center(request).store.create_app, fields, body.admins or [], operator, grant)
    return _empty()


@router.get("/apps")
async def find_apps(request: Request, appIds: str | None = None,
                    _: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    wanted = [a.strip().lower() for a in appIds.split(",") if a.strip()] if appIds else None

    def q(s: Session) -> list[dict[str, Any]]:
        rows = s.scalars(select(m.App).order_by(m.App.id)).all()
        return [dto.app_dto(a) for a in rows if wanted is None or a.app_id.lower() in wanted]

    result: list[dict[str, Any]] = await _read(request, q)
    return result


@router.get("/apps/authorized")
async def find_apps_authorized(request: Request, token: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    def q(s: Session) -> list[dict[str, Any]]:
        return [dto.app_dto(a) for a in s.scalars(select(m.App).order_by(m.App.id)) if token.may_manage(a.app_id)]

    result: list[dict[str, Any]] = await _read(request, q)
    return result


@router.get("/apps/{app_id}")
async def get_app(request: Request, app_id: str, _: TokenView = Depends(consumer)) -> dict[str, Any]:
    def q(s: Session) -> dict[str, Any]:
        app = s.scalar(select(m.App).where(m.App.app_id == app_id))
        if app is None:
            raise BadRequest("App not found: %s", app_id)
        return dto.app_dto(app)

    result: dict[str, Any] = await _read(request, q)
    return result


@router.get("/apps/{app_id}/envclusters")
async def env_clusters(request: Request, app_id: str, _: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    def q(s: Session) -> list[dict[str, Any]]:
        Store.app(s, app_id)
        names = [c.name for c in s.scalars(select(m.Cluster).where(m.Cluster.app_id == app_id,
                                                                    m.Cluster.parent_cluster_id == 0)
                                           .order_by(m.Cluster.id))]
        return [{"env": DEFAULT_ENV, "clusters": names}]

    result: list[dict[str, Any]] = await _read(request, q)
    return result


@router.get("/envs")
async def envs(_: TokenView = Depends(consumer)) -> list[str]:
    return [DEFAULT_ENV]


@router.post("/apps/{app_id}/appnamespaces")
async def create_app_namespace(request: Request, app_id: str, body: OpenAppNamespaceIn,
                               operator: str | None = None, token: TokenView = Depends(consumer)) -> dict[str, Any]:
    """NamespaceController.createAppNamespace: the namespace exists in every cluster of the app."""
    _allow(token, app_id)
    if body.appId != app_id:
        raise BadRequest("AppId not equal. AppId in path = %s, AppId in payload = %s", app_id, body.appId)
    if not body.name or not body.format:
        raise BadRequest("name and format can not be empty")
    if not _APP_NAMESPACE.match(body.name) or _RESERVED_SUFFIX.search(body.name):
        raise BadRequest("invalid namespace format:%s & %s", INVALID_NAME,
                         "not allowed to end with .json, .yml, .yaml, .xml, .properties")
    if body.format not in FORMATS:
        raise BadRequest("invalid namespace format:%s", body.format)
    if body.comment and len(body.comment) > 64:
        raise BadRequest("comment length should not exceed 64 characters")
    who = _operator(operator, body.dataChangeCreatedBy)
    center = _center(request)
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

    result: list[dict[str, Any]] = await _read(request, q)
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

    result: dict[str, Any] = await _read(request, q)
    return result


@router.get("/envs/{env}/apps/{app_id}/clusters/{cluster}")
async def get_cluster(request: Request, env: str, app_id: str, cluster: str,
                      _: TokenView = Depends(consumer)) -> dict[str, Any]:
    result: dict[str, Any] = await _read(request, lambda s: dto.cluster_dto(Store.cluster(s, app_id, cluster)))
    return result


@router.post("/envs/{env}/apps/{app_id}/clusters")
async def create_cluster(request: Request, env: str, app_id: str, body: OpenClusterIn,
                         operator: str | None = None, token: TokenView = Depends(consumer)) -> dict[str, Any]:
    _allow(token, app_id)
    if not body.name or body.appId is None:
        raise BadRequest("name and appId can not be empty")
    if body.appId != app_id:
        raise BadRequest("AppId not equal. AppId in path = %s, AppId in payload = %s", app_id, body.appId)
    if not _CLUSTER_NAMESPACE.match(body.name):
        raise BadRequest("invalid clusterName format:%s", INVALID_NAME)
    who = _operator(operator, body.dataChangeCreatedBy)
    center = _center(request)
    result: dict[str, Any] = await center.write(center.store.create_cluster, app_id, body.name, who)
    return result


# ----------------------------------------------------------------------------------------------
# namespaces
# ----------------------------------------------------------------------------------------------
def _namespace_view(s: Session, ns: m.Namespace, fill: bool) -> dict[str, Any]:
    return dto.namespace_dto(ns, Store.app_namespace(s, ns.app_id, ns.namespace_name),
                             Store.items(s, ns) if fill else None)


@router.get("/envs/{env}/apps/{app_id}/clusters/{cluster}/namespaces")
async def find_namespaces(request: Request, env: str, app_id: str, cluster: str, fillItemDetail: bool = True,
                          _: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    def q(s: Session) -> list[dict[str, Any]]:
        Store.cluster(s, app_id, cluster)
        rows = s.scalars(select(m.Namespace).where(m.Namespace.app_id == app_id, m.Namespace.cluster_name == cluster)
                         .order_by(m.Namespace.id))
        return [_namespace_view(s, ns, fillItemDetail) for ns in rows]

    result: list[dict[str, Any]] = await _read(request, q)
    return result


@router.get(NS)
async def find_namespace(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                         fillItemDetail: bool = True, _: TokenView = Depends(consumer)) -> dict[str, Any]:
    result: dict[str, Any] = await _read(
        request, lambda s: _namespace_view(s, Store.namespace(s, app_id, cluster, namespace), fillItemDetail))
    return result


@router.get(NS + "/lock")
async def namespace_lock(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                         _: TokenView = Depends(consumer)) -> dict[str, Any]:
    """No edit locks here (Apollo only locks when namespace.lock.switch is on)."""
    await _read(request, lambda s: Store.namespace(s, app_id, cluster, namespace))
    return {"namespaceName": namespace, "isLocked": False}


# ----------------------------------------------------------------------------------------------
# items (also reached through /branches/{branch}/items: a branch is a child cluster)
# ----------------------------------------------------------------------------------------------
async def _list_items(request: Request, app_id: str, cluster: str, namespace: str, page: int,
                      size: int) -> dict[str, Any]:
    if page < 0 or size < 0:
        raise BadRequest("page and size must not be negative")

    def q(s: Session) -> dict[str, Any]:
        ns = Store.namespace(s, app_id, cluster, namespace)
        total = s.scalar(select(func.count(m.Item.id)).where(m.Item.namespace_id == ns.id)) or 0
        rows = s.scalars(select(m.Item).where(m.Item.namespace_id == ns.id).order_by(m.Item.line_num, m.Item.id)
                         .offset(page * size).limit(size))
        return {"content": [dto.item_dto(i) for i in rows], "page": page, "size": size, "total": total}

    result: dict[str, Any] = await _read(request, q)
    return result


async def _get_item(request: Request, app_id: str, cluster: str, namespace: str, key: str) -> dict[str, Any]:
    def q(s: Session) -> dict[str, Any]:
        ns = Store.namespace(s, app_id, cluster, namespace)
        item = s.scalar(select(m.Item).where(m.Item.namespace_id == ns.id, m.Item.key == key))
        if item is None:
            raise NotFound("item not found for appId:%s clusterName:%s namespaceName:%s itemKey:%s",
                           app_id, cluster, namespace, key)
        return dto.item_dto(item)

    result: dict[str, Any] = await _read(request, q)
    return result


async def _create_item(request: Request, token: TokenView, app_id: str, cluster: str, namespace: str,
                       body: OpenItemIn, operator: str | None) -> dict[str, Any]:
    _allow(token, app_id)
    key, value = _check_item(body.key, body.value, body.comment)
    who = _operator(operator, body.dataChangeCreatedBy)
    center = _center(request)
    result: dict[str, Any] = await center.write(center.store.create_item, app_id, cluster, namespace, key, value,
                                                body.comment or "", body.type or 0, who)
    return result


async def _update_item(request: Request, token: TokenView, app_id: str, cluster: str, namespace: str, key: str,
                       body: OpenItemIn, create_if_not_exists: bool, operator: str | None) -> Response:
    _allow(token, app_id)
    given, value = _check_item(body.key, body.value, body.comment)
    if given != key:
        raise BadRequest("Key in path and payload is not consistent")
    payload_operator = body.dataChangeLastModifiedBy
    if create_if_not_exists and not (payload_operator and payload_operator.strip()):
        payload_operator = body.dataChangeCreatedBy
    who = _operator(operator, payload_operator)
    center = _center(request)
    await center.write(center.store.update_item, app_id, cluster, namespace, key, value, body.comment, body.type,
                       who, body.dataChangeCreatedBy or who, create_if_not_exists)
    return _empty()


async def _delete_item(request: Request, token: TokenView, app_id: str, cluster: str, namespace: str, key: str,
                       operator: str | None) -> Response:
    _allow(token, app_id)
    who = _operator(operator)
    center = _center(request)
    await center.write(center.store.delete_item, app_id, cluster, namespace, key, who)
    return _empty()


@router.get(NS + "/items")
async def find_items(request: Request, env: str, app_id: str, cluster: str, namespace: str, page: int = Page,
                     size: int = Query(50, ge=0, le=2000), _: TokenView = Depends(consumer)) -> dict[str, Any]:
    return await _list_items(request, app_id, cluster, namespace, page, size)


@router.post(NS + "/items")
async def create_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, body: OpenItemIn,
                      operator: str | None = None, token: TokenView = Depends(consumer)) -> dict[str, Any]:
    return await _create_item(request, token, app_id, cluster, namespace, body, operator)


@router.get(NS + "/items/{key}")
async def get_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, key: str,
                   _: TokenView = Depends(consumer)) -> dict[str, Any]:
    return await _get_item(request, app_id, cluster, namespace, key)


@router.put(NS + "/items/{key}")
async def update_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, key: str,
                      body: OpenItemIn, createIfNotExists: bool = False, operator: str | None = None,
                      token: TokenView = Depends(consumer)) -> Response:
    return await _update_item(request, token, app_id, cluster, namespace, key, body, createIfNotExists, operator)


@router.delete(NS + "/items/{key}")
async def delete_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, key: str,
                      operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    return await _delete_item(request, token, app_id, cluster, namespace, key, operator)


@router.get(NS + "/encodedItems/{key}")
async def get_encoded_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, key: str,
                           _: TokenView = Depends(consumer)) -> dict[str, Any]:
    return await _get_item(request, app_id, cluster, namespace, _decode_key(key))


@router.put(NS + "/encodedItems/{key}")
async def update_encoded_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, key: str,
                              body: OpenItemIn, createIfNotExists: bool = False, operator: str | None = None,
                              token: TokenView = Depends(consumer)) -> Response:
    return await _update_item(request, token, app_id, cluster, namespace, _decode_key(key), body, createIfNotExists,
                              operator)


@router.delete(NS + "/encodedItems/{key}")
async def delete_encoded_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, key: str,
                              operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    return await _delete_item(request, token, app_id, cluster, namespace, _decode_key(key), operator)


# ----------------------------------------------------------------------------------------------
# releases
# ----------------------------------------------------------------------------------------------
async def _publish(request: Request, token: TokenView, app_id: str, cluster: str, namespace: str,
                   body: NamespaceReleaseIn, operator: str | None) -> dict[str, Any]:
    _allow(token, app_id)
    title, comment, who = _check_release(body, operator)
    center = _center(request)
    result: dict[str, Any] = await center.write(center.store.publish, app_id, cluster, namespace, title, comment,
                                                who)
    return result


@router.post(NS + "/releases")
async def create_release(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                         body: NamespaceReleaseIn, operator: str | None = None,
                         token: TokenView = Depends(consumer)) -> dict[str, Any]:
    """ReleaseController.createRelease: on a branch cluster this is a gray release, as in Apollo."""
    return await _publish(request, token, app_id, cluster, namespace, body, operator)


@router.get(NS + "/releases/latest")
async def latest_release(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                         _: TokenView = Depends(consumer)) -> Response:
    """The latest active release; an empty 200 when the namespace was never released (as Apollo)."""

    def q(s: Session) -> dict[str, Any] | None:
        Store.namespace(s, app_id, cluster, namespace)
        rel = Store.latest_release(s, app_id, cluster, namespace)
        return dto.release_dto(rel) if rel is not None else None

    result = await _read(request, q)
    if result is None:
        return _empty()
    return JSONResponse(result)


@router.get(NS + "/releases/active")
async def active_releases(request: Request, env: str, app_id: str, cluster: str, namespace: str, page: int = Page,
                          size: int = Query(5, ge=0, le=2000),
                          _: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    if page < 0 or size < 0:
        raise BadRequest("page and size must not be negative")

    def q(s: Session) -> list[dict[str, Any]]:
        Store.namespace(s, app_id, cluster, namespace)
        rows = s.scalars(select(m.Release).where(
            m.Release.app_id == app_id, m.Release.cluster_name == cluster, m.Release.namespace_name == namespace,
            m.Release.is_abandoned.is_(False)).order_by(m.Release.id.desc()).offset(page * size).limit(size))
        return [dto.release_dto(r) for r in rows]

    result: list[dict[str, Any]] = await _read(request, q)
    return result


@router.get("/envs/{env}/releases/{release_id}")
async def get_release(request: Request, env: str, release_id: int = ReleaseId,
                      _: TokenView = Depends(consumer)) -> dict[str, Any]:
    def q(s: Session) -> dict[str, Any]:
        rel = s.get(m.Release, release_id)
        if rel is None:
            raise NotFound("release not found for releaseId:%s", release_id)
        return dto.release_dto(rel)

    result: dict[str, Any] = await _read(request, q)
    return result


@router.put("/envs/{env}/releases/{release_id}/rollback")
async def rollback(request: Request, env: str, release_id: int = ReleaseId, operator: str | None = None,
                   toReleaseId: int | None = Query(None, ge=-1, le=MAX_ID),
                   token: TokenView = Depends(consumer)) -> Response:
    """ReleaseController.rollback: abandon this release (or every release after `toReleaseId`)."""
    who = _operator(operator)

    def owner(s: Session) -> str:
        rel = s.get(m.Release, release_id)
        if rel is None:
            raise NotFound("release not found for releaseId:%s", release_id)
        return rel.app_id

    _allow(token, await _read(request, owner))
    center = _center(request)
    target = toReleaseId if toReleaseId is not None and toReleaseId > -1 else None
    await center.write(center.store.rollback, release_id, target, who)
    return _empty()


# ----------------------------------------------------------------------------------------------
# gray release branches
# ----------------------------------------------------------------------------------------------
@router.get(NS + "/branches")
async def find_branch(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                      _: TokenView = Depends(consumer)) -> Response:
    def q(s: Session) -> dict[str, Any] | None:
        Store.namespace(s, app_id, cluster, namespace)
        child = Store.child_namespace(s, app_id, cluster, namespace)
        return _namespace_view(s, child, True) if child is not None else None

    result = await _read(request, q)
    if result is None:
        return _empty()
    return JSONResponse(result)


@router.post(NS + "/branches")
async def create_branch(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                        operator: str | None = None, token: TokenView = Depends(consumer)) -> dict[str, Any]:
    _allow(token, app_id)
    who = _operator(operator)
    center = _center(request)
    result: dict[str, Any] = await center.write(center.store.create_branch, app_id, cluster, namespace, who)
    return result


@router.delete(BRANCH)
async def delete_branch(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                        operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    """Abandon the gray release: matching clients are served the main release again."""
    _allow(token, app_id)
    who = _operator(operator)
    center = _center(request)
    await center.write(center.store.delete_branch, app_id, cluster, namespace, branch, who)
    return _empty()


async def _merge(request: Request, token: TokenView, app_id: str, cluster: str, namespace: str, branch: str,
                 delete_branch: bool, body: NamespaceReleaseIn, operator: str | None) -> dict[str, Any]:
    _allow(token, app_id)
    title, comment, who = _check_release(body, operator)
    center = _center(request)
    result: dict[str, Any] = await center.write(center.store.merge, app_id, cluster, namespace, branch,
                                                delete_branch, title, comment, who)
    return result


@router.post(BRANCH)
async def merge_branch(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                       body: NamespaceReleaseIn, deleteBranch: bool = True, operator: str | None = None,
                       token: TokenView = Depends(consumer)) -> dict[str, Any]:
    """apollo-openapi `mergeBranch`: POST on the branch merges it into the main namespace."""
    return await _merge(request, token, app_id, cluster, namespace, branch, deleteBranch, body, operator)


@router.post(BRANCH + "/merge")
async def merge(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                body: NamespaceReleaseIn, deleteBranch: bool = True, operator: str | None = None,
                token: TokenView = Depends(consumer)) -> dict[str, Any]:
    """apollo-openapi `merge` (the original path)."""
    return await _merge(request, token, app_id, cluster, namespace, branch, deleteBranch, body, operator)


@router.patch(BRANCH + "/merge")
async def merge_patch(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                      body: NamespaceReleaseIn, deleteBranch: bool = True, operator: str | None = None,
                      token: TokenView = Depends(consumer)) -> dict[str, Any]:
    """Alias kept for scripts that PATCH the merge path."""
    return await _merge(request, token, app_id, cluster, namespace, branch, deleteBranch, body, operator)


@router.get(BRANCH + "/rules")
async def get_rules(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                    _: TokenView = Depends(consumer)) -> Response:
    def q(s: Session) -> dict[str, Any] | None:
        parent, child = _center(request).store.branch(s, app_id, cluster, namespace, branch)
        rule = s.scalar(select(m.GrayReleaseRule).where(
            m.GrayReleaseRule.app_id == parent.app_id, m.GrayReleaseRule.cluster_name == parent.cluster_name,
            m.GrayReleaseRule.namespace_name == parent.namespace_name,
            m.GrayReleaseRule.branch_name == child.cluster_name).order_by(m.GrayReleaseRule.id.desc()).limit(1))
        return dto.gray_rule_dto(rule) if rule is not None else None

    result = await _read(request, q)
    if result is None:
        return _empty()
    return JSONResponse(result)


@router.put(BRANCH + "/rules")
async def update_rules(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                       body: OpenGrayReleaseRuleIn, operator: str | None = None,
                       token: TokenView = Depends(consumer)) -> Response:
    """Set which clients (app id + IPs / labels, `*` for all) are served the branch's release."""
    _allow(token, app_id)
    who = _operator(operator)
    if body.ruleItems is None:
        raise BadRequest("gray release rule payload can not be empty")
    items: list[dict[str, Any]] = []
    for item in body.ruleItems:
        if not item.clientAppId or not item.clientAppId.strip():
            raise BadRequest("clientAppId can not be empty")
        items.append({"clientAppId": item.clientAppId, "clientIpList": sorted(set(item.clientIpList or [])),
                      "clientLabelList": sorted(set(item.clientLabelList or []))})
    center = _center(request)
    await center.write(center.store.update_rules, app_id, cluster, namespace, branch, items, who)
    return _empty()


@router.post(BRANCH + "/releases")
async def create_gray_release(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                              body: NamespaceReleaseIn, operator: str | None = None,
                              token: TokenView = Depends(consumer)) -> dict[str, Any]:
    await _read(request, lambda s: _center(request).store.branch(s, app_id, cluster, namespace, branch))
    return await _publish(request, token, app_id, branch, namespace, body, operator)


@router.get(BRANCH + "/items")
async def find_branch_items(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                            _: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    def q(s: Session) -> list[dict[str, Any]]:
        _, child = _center(request).store.branch(s, app_id, cluster, namespace, branch)
        return [dto.item_dto(i) for i in Store.items(s, child)]

    result: list[dict[str, Any]] = await _read(request, q)
    return result


@router.post(BRANCH + "/items")
async def create_branch_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                             body: OpenItemIn, operator: str | None = None,
                             token: TokenView = Depends(consumer)) -> dict[str, Any]:
    await _read(request, lambda s: _center(request).store.branch(s, app_id, cluster, namespace, branch))
    return await _create_item(request, token, app_id, branch, namespace, body, operator)


@router.get(BRANCH + "/items/{key}")
async def get_branch_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                          key: str, _: TokenView = Depends(consumer)) -> dict[str, Any]:
    await _read(request, lambda s: _center(request).store.branch(s, app_id, cluster, namespace, branch))
    return await _get_item(request, app_id, branch, namespace, key)


@router.put(BRANCH + "/items/{key}")
async def update_branch_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                             key: str, body: OpenItemIn, createIfNotExists: bool = False, operator: str | None = None,
                             token: TokenView = Depends(consumer)) -> Response:
    await _read(request, lambda s: _center(request).store.branch(s, app_id, cluster, namespace, branch))
    return await _update_item(request, token, app_id, branch, namespace, key, body, createIfNotExists, operator)


@router.delete(BRANCH + "/items/{key}")
async def delete_branch_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                             key: str, operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    await _read(request, lambda s: _center(request).store.branch(s, app_id, cluster, namespace, branch))
    return await _delete_item(request, token, app_id, branch, namespace, key, operator)



# ----------------------------------------------------------------------------------------------
# access keys (config-service signatures)
# ----------------------------------------------------------------------------------------------
ACCESS_KEYS = "/apps/{app_id}/envs/{env}/accesskeys"
KeyId = Path(ge=1, le=MAX_ID)


@router.post(ACCESS_KEYS)
async def create_access_key(request: Request, app_id: str, env: str, operator: str | None = None,
                            token: TokenView = Depends(consumer)) -> dict[str, Any]:
    """A new secret, disabled until activated, as in Apollo."""
    _allow(token, app_id)
    who = _operator(operator)
    center = _center(request)
    result: dict[str, Any] = await center.write(center.store.create_access_key, app_id, who)
    return result


@router.get(ACCESS_KEYS)
async def find_access_keys(request: Request, app_id: str, env: str,
                           token: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    _allow(token, app_id)

    def q(s: Session) -> list[dict[str, Any]]:
        Store.app(s, app_id)
        rows = s.scalars(select(m.AccessKey).where(m.AccessKey.app_id == app_id).order_by(m.AccessKey.id))
        return [dto.access_key_dto(k) for k in rows]

    result: list[dict[str, Any]] = await _read(request, q)
    return result


@router.put(ACCESS_KEYS + "/{key_id}/activation")
async def enable_access_key(request: Request, app_id: str, env: str, key_id: int = KeyId,
                            mode: int = Query(0, ge=0, le=1), operator: str | None = None,
                            token: TokenView = Depends(consumer)) -> Response:
    """Enable a key: mode 0 enforces signatures, mode 1 only logs requests that would fail."""
    _allow(token, app_id)
    center = _center(request)
    await center.write(center.store.update_access_key, app_id, key_id, True, mode, _operator(operator))
    return _empty()


@router.put(ACCESS_KEYS + "/{key_id}/deactivation")
async def disable_access_key(request: Request, app_id: str, env: str, key_id: int = KeyId,
                             operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    _allow(token, app_id)
    center = _center(request)
    await center.write(center.store.update_access_key, app_id, key_id, False, 0, _operator(operator))
    return _empty()


@router.delete(ACCESS_KEYS + "/{key_id}")
async def delete_access_key(request: Request, app_id: str, env: str, key_id: int = KeyId,
                            operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    _allow(token, app_id)
    center = _center(request)
    await center.write(center.store.delete_access_key, app_id, key_id, _operator(operator))
    return _empty()
