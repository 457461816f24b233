"""Open API: publish, read and roll back releases."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from .. import dto
from .. import models as m
from ..errors import BadRequest, NotFound
from ..readmodel import TokenView
from ..store import Store
from .common import (
    MAX_ID,
    NS,
    NamespaceReleaseIn,
    Page,
    ReleaseId,
    allow,
    center_of,
    check_release,
    consumer,
    empty,
    operator_of,
    read,
)

router = APIRouter(prefix="/openapi/v1")


# ----------------------------------------------------------------------------------------------
# releases
# ----------------------------------------------------------------------------------------------
async def publish_in(request: Request, token: TokenView, app_id: str, cluster: str, namespace: str,
                     body: NamespaceReleaseIn, operator: str | None,
                     gray_del_keys: frozenset[str] = frozenset()) -> dict[str, Any]:
    allow(token, app_id)
    title, comment, who = check_release(body, operator)
    center = center_of(request)
    result: dict[str, Any] = await center.write(center.store.publish, app_id, cluster, namespace, title, comment,
                                                who, gray_del_keys)
    return result


@router.post(NS + "/releases")
async def create_release(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                         body: NamespaceReleaseIn, operator: str | None = None,
                         token: TokenView = Depends(consumer)) -> dict[str, Any]:
    """ReleaseController.createRelease: on a branch cluster this is a gray release, as in Apollo."""
    return await publish_in(request, token, app_id, cluster, namespace, body, operator)


@router.get(NS + "/releases/latest")
async def latest_release(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                         _: TokenView = Depends(consumer)) -> Response:
    """The latest active release; an empty 200 when the namespace was never released (as Apollo)."""

    def q(s: Session) -> dict[str, Any] | None:
        Store.namespace(s, app_id, cluster, namespace)
        rel = Store.latest_release(s, app_id, cluster, namespace)
        return dto.release_dto(rel) if rel is not None else None

    result = await read(request, q)
    if result is None:
        return empty()
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

    result: list[dict[str, Any]] = await read(request, q)
    return result


@router.get("/envs/{env}/releases/{release_id}")
async def get_release(request: Request, env: str, release_id: int = ReleaseId,
                      _: TokenView = Depends(consumer)) -> dict[str, Any]:
    def q(s: Session) -> dict[str, Any]:
        rel = s.get(m.Release, release_id)
        if rel is None:
            raise NotFound("release not found for releaseId:%s", release_id)
        return dto.release_dto(rel)

    result: dict[str, Any] = await read(request, q)
    return result


@router.put("/envs/{env}/releases/{release_id}/rollback")
async def rollback(request: Request, env: str, release_id: int = ReleaseId, operator: str | None = None,
                   toReleaseId: int | None = Query(None, ge=-1, le=MAX_ID),
                   token: TokenView = Depends(consumer)) -> Response:
    """ReleaseController.rollback: abandon this release (or every release after `toReleaseId`)."""
    who = operator_of(operator)

    def owner(s: Session) -> str:
        rel = s.get(m.Release, release_id)
        if rel is None:
            raise NotFound("release not found for releaseId:%s", release_id)
        return rel.app_id

    allow(token, await read(request, owner))
    center = center_of(request)
    target = toReleaseId if toReleaseId is not None and toReleaseId > -1 else None
    await center.write(center.store.rollback, release_id, target, who)
    return empty()
