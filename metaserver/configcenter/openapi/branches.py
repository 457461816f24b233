"""Open API: gray-release branches — rules, branch items, gray release, merge, abandon."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from .. import dto
from .. import models as m
from ..errors import BadRequest
from ..readmodel import TokenView
from ..store import Store
from .apps import namespace_view
from .common import (
    BRANCH,
    NS,
    NamespaceGrayDelReleaseIn,
    NamespaceReleaseIn,
    OpenGrayReleaseRuleIn,
    OpenItemIn,
    allow,
    center_of,
    check_release,
    consumer,
    empty,
    operator_of,
    read,
)
from .items import create_item_in, delete_item_in, get_item_of, update_item_in
from .releases import publish_in

router = APIRouter(prefix="/openapi/v1")


# ----------------------------------------------------------------------------------------------
# gray release branches
# ----------------------------------------------------------------------------------------------
async def _branch_exists(request: Request, app_id: str, cluster: str, namespace: str, branch: str) -> None:
    """Raise Apollo's not-found error unless ``branch`` is the namespace's gray branch (before writing through it)."""
    await read(request, lambda s: center_of(request).store.branch(s, app_id, cluster, namespace, branch))


@router.get(NS + "/branches")
async def find_branch(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                      _: TokenView = Depends(consumer)) -> Response:
    def q(s: Session) -> dict[str, Any] | None:
        Store.namespace(s, app_id, cluster, namespace)
        child = Store.child_namespace(s, app_id, cluster, namespace)
        return namespace_view(s, child, True) if child is not None else None

    result = await read(request, q)
    if result is None:
        return empty()
    return JSONResponse(result)


@router.post(NS + "/branches")
async def create_branch(request: Request, env: str, app_id: str, cluster: str, namespace: str,
                        operator: str | None = None, token: TokenView = Depends(consumer)) -> dict[str, Any]:
    allow(token, app_id)
    who = operator_of(operator)
    center = center_of(request)
    result: dict[str, Any] = await center.write(center.store.create_branch, app_id, cluster, namespace, who)
    return result


@router.delete(BRANCH)
async def delete_branch(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                        operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    """Abandon the gray release: matching clients are served the main release again."""
    allow(token, app_id)
    who = operator_of(operator)
    center = center_of(request)
    await center.write(center.store.delete_branch, app_id, cluster, namespace, branch, who)
    return empty()


async def _merge(request: Request, token: TokenView, app_id: str, cluster: str, namespace: str, branch: str,
                 delete_branch: bool, body: NamespaceReleaseIn, operator: str | None) -> dict[str, Any]:
    allow(token, app_id)
    title, comment, who = check_release(body, operator)
    center = center_of(request)
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
        parent, child = center_of(request).store.branch(s, app_id, cluster, namespace, branch)
        rule = s.scalar(select(m.GrayReleaseRule).where(
            m.GrayReleaseRule.app_id == parent.app_id, m.GrayReleaseRule.cluster_name == parent.cluster_name,
            m.GrayReleaseRule.namespace_name == parent.namespace_name,
            m.GrayReleaseRule.branch_name == child.cluster_name).order_by(m.GrayReleaseRule.id.desc()).limit(1))
        return dto.gray_rule_dto(rule) if rule is not None else None

    result = await read(request, q)
    if result is None:
        return empty()
    return JSONResponse(result)


@router.put(BRANCH + "/rules")
async def update_rules(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                       body: OpenGrayReleaseRuleIn, operator: str | None = None,
                       token: TokenView = Depends(consumer)) -> Response:
    """Set which clients (app id + IPs / labels, `*` for all) are served the branch's release."""
    allow(token, app_id)
    who = operator_of(operator)
    if body.ruleItems is None:
        raise BadRequest("gray release rule payload can not be empty")
    items: list[dict[str, Any]] = []
    for item in body.ruleItems:
        if not item.clientAppId or not item.clientAppId.strip():
            raise BadRequest("clientAppId can not be empty")
        items.append({"clientAppId": item.clientAppId, "clientIpList": sorted(set(item.clientIpList or [])),
                      "clientLabelList": sorted(set(item.clientLabelList or []))})
    center = center_of(request)
    await center.write(center.store.update_rules, app_id, cluster, namespace, branch, items, who)
    return empty()


@router.post(BRANCH + "/releases")
async def create_gray_release(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                              body: NamespaceReleaseIn, operator: str | None = None,
                              token: TokenView = Depends(consumer)) -> dict[str, Any]:
    await _branch_exists(request, app_id, cluster, namespace, branch)
    return await publish_in(request, token, app_id, branch, namespace, body, operator)


@router.post(BRANCH + "/gray-del-releases")
async def create_gray_del_release(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                                  body: NamespaceGrayDelReleaseIn, operator: str | None = None,
                                  token: TokenView = Depends(consumer)) -> dict[str, Any]:
    """ReleaseController.createGrayDelRelease (Apollo >= 1.9): a gray release without ``grayDelKeys``."""
    await _branch_exists(request, app_id, cluster, namespace, branch)
    keys = frozenset(k for k in body.grayDelKeys or [] if k)
    return await publish_in(request, token, app_id, branch, namespace, body, operator, keys)


@router.get(BRANCH + "/items")
async def find_branch_items(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                            _: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    def q(s: Session) -> list[dict[str, Any]]:
        _, child = center_of(request).store.branch(s, app_id, cluster, namespace, branch)
        return [dto.item_dto(i) for i in Store.items(s, child)]

    result: list[dict[str, Any]] = await read(request, q)
    return result


@router.post(BRANCH + "/items")
async def create_branch_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                             body: OpenItemIn, operator: str | None = None,
                             token: TokenView = Depends(consumer)) -> dict[str, Any]:
    await _branch_exists(request, app_id, cluster, namespace, branch)
    return await create_item_in(request, token, app_id, branch, namespace, body, operator)


@router.get(BRANCH + "/items/{key}")
async def get_branch_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                          key: str, _: TokenView = Depends(consumer)) -> dict[str, Any]:
    await _branch_exists(request, app_id, cluster, namespace, branch)
    return await get_item_of(request, app_id, branch, namespace, key)


@router.put(BRANCH + "/items/{key}")
async def update_branch_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                             key: str, body: OpenItemIn, createIfNotExists: bool = False, operator: str | None = None,
                             token: TokenView = Depends(consumer)) -> Response:
    await _branch_exists(request, app_id, cluster, namespace, branch)
    return await update_item_in(request, token, app_id, branch, namespace, key, body, createIfNotExists, operator)


@router.delete(BRANCH + "/items/{key}")
async def delete_branch_item(request: Request, env: str, app_id: str, cluster: str, namespace: str, branch: str,
                             key: str, operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    await _branch_exists(request, app_id, cluster, namespace, branch)
    return await delete_item_in(request, token, app_id, branch, namespace, key, operator)
