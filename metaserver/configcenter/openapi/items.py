"""Open API: items of a namespace (a gray branch is a child cluster, so its items too)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .. import dto
from .. import models as m
from ..errors import BadRequest, NotFound
from ..readmodel import TokenView
from ..store import Store
from .common import (
    NS,
    OpenItemIn,
    Page,
    allow,
    center_of,
    check_item,
    consumer,
    decode_key,
    empty,
    operator_of,
    read,
)

router = APIRouter(prefix="/openapi/v1")


# ----------------------------------------------------------------------------------------------
# items (also reached through /branches/{branch}/items: a branch is a child cluster)
# ----------------------------------------------------------------------------------------------
async def list_items(request: Request, app_id: str, cluster: str, namespace: str, page: int,
                     size: int) -> dict[str, Any]:
    if page < 0 or size < 0:
        raise BadRequest("page and size must not be negative")

    def q(s: Session) -> dict[str, Any]:
        ns = Store.namespace(s, app_id, cluster, namespace)
        total = s.scalar(select(func.count(m.Item.id)).where(m.Item.namespace_id == ns.id)) or 0
        rows = s.scalars(select(m.Item).where(m.Item.namespace_id == ns.id).order_by(m.Item.line_num, m.Item.id)
                         .offset(page * size).limit(size))
        return {"content": [dto.item_dto(i) for i in rows], "page": page, "size": size, "total": total}

    result: dict[str, Any] = await read(request, q)
    return result


async def get_item_of(request: Request, app_id: str, cluster: str, namespace: str, key: str) -> dict[str, Any]:
    def q(s: Session) -> dict[str, Any]:
        ns = Store.namespace(s, app_id, cluster, namespace)
        item = s.scalar(select(m.Item).where(m.Item.namespace_id == ns.id, m.Item.key == key))
        if item is None:
            raise NotFound("item not found for appId:%s clusterName:%s namespaceName:%s itemKey:%s",
                           app_id, cluster, namespace, key)
        return dto.item_dto(item)

    result: dict[str, Any] = await read(request, q)
    return result


async def create_item_in(request: Request, token: TokenView, app_id: str, cluster: str, namespace: str,
                         body: OpenItemIn, operator: str | None) -> dict[str, Any]:
    allow(token, app_id)
    key, value = check_item(body.key, body.value, body.comment)
    who = operator_of(operator, body.dataChangeCreatedBy)
    center = center_of(request)
    result: dict[str, Any] = await center.write(center.store.create_item, app_id, cluster, namespace, key, value,
                                                body.comment or "", body.type or 0, who)
    return result


async def update_item_in(request: Request, token: TokenView, app_id: str, cluster: str, namespace: str, key: str,
                         body: OpenItemIn, create_if_not_exists: bool, operator: str | None) -> Response:
    allow(token, app_id)
    given, value = check_item(body.key, body.value, body.comment)
    if given != key:
        raise BadRequest("Key in path and payload is not consistent")
    payload_operator = body.dataChangeLastModifiedBy
    if create_if_not_exists and not (payload_operator and payload_operator.strip()):
        payload_operator = body.dataChangeCreatedBy
    who = operator_of(operator, payload_operator)
    center = center_of(request)
    await center.write(center.store.update_item, app_id, cluster, namespace, key, value, body.comment, body.type,
                       who, body.dataChangeCreatedBy or who, create_if_not_exists)
    return empty()


async def delete_item_in(request: Request, token: TokenView, app_id: str, cluster: str, namespace: str, key: str,
                         operator: str | None) -> Response:
    allow(token, app_id)
    who = operator_of(operator)
    center = center_of(request)
    await center.write(center.store.delete_item, app_id, cluster, namespace, key, who)
    return empty()


@router.get(NS + "/items")
async def find_items(request: Request, env: str, app_id: str, cluster: str, namespace: str, page: int = Page,
                     size: int = Query(50, ge=0, le=2000), _: TokenView = Depends(consumer)) -> dict[str, Any]:
    return await list_items(request, app_id, cluster, namespace, page, size)


@router.post(NS + "/items")
async def create_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, body: OpenItemIn,
                      operator: str | None = None, token: TokenView = Depends(consumer)) -> dict[str, Any]:
    return await create_item_in(request, token, app_id, cluster, namespace, body, operator)


@router.get(NS + "/items/{key}")
async def get_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, key: str,
                   _: TokenView = Depends(consumer)) -> dict[str, Any]:
    return await get_item_of(request, app_id, cluster, namespace, key)


@router.put(NS + "/items/{key}")
async def update_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, key: str,
                      body: OpenItemIn, createIfNotExists: bool = False, operator: str | None = None,
                      token: TokenView = Depends(consumer)) -> Response:
    return await update_item_in(request, token, app_id, cluster, namespace, key, body, createIfNotExists, operator)


@router.delete(NS + "/items/{key}")
async def delete_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, key: str,
                      operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    return await delete_item_in(request, token, app_id, cluster, namespace, key, operator)


@router.get(NS + "/encodedItems/{key}")
async def get_encoded_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, key: str,
                           _: TokenView = Depends(consumer)) -> dict[str, Any]:
    return await get_item_of(request, app_id, cluster, namespace, decode_key(key))


@router.put(NS + "/encodedItems/{key}")
async def update_encoded_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, key: str,
                              body: OpenItemIn, createIfNotExists: bool = False, operator: str | None = None,
                              token: TokenView = Depends(consumer)) -> Response:
    return await update_item_in(request, token, app_id, cluster, namespace, decode_key(key), body, createIfNotExists,
                              operator)


@router.delete(NS + "/encodedItems/{key}")
async def delete_encoded_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, key: str,
                              operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    return await delete_item_in(request, token, app_id, cluster, namespace, decode_key(key), operator)
