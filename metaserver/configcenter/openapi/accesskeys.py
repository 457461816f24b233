"""Open API: access keys that make config-service calls of an app signed."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from .. import dto, keyscope
from .. import models as m
from ..readmodel import TokenView
from ..store import Store
from .common import (
    MAX_ID,
    allow,
    center_of,
    consumer,
    empty,
    operator_of,
    read,
)

router = APIRouter(prefix="/openapi/v1")


# ----------------------------------------------------------------------------------------------
# access keys (config-service signatures)
# ----------------------------------------------------------------------------------------------
ACCESS_KEYS = "/apps/{app_id}/envs/{env}/accesskeys"
KeyId = Path(ge=1, le=MAX_ID)


@router.post(ACCESS_KEYS)
async def create_access_key(request: Request, app_id: str, env: str, operator: str | None = None,
                            token: TokenView = Depends(consumer)) -> dict[str, Any]:
    """A new secret, disabled until activated, as in Apollo."""
    allow(token, app_id)
    who = operator_of(operator)
    center = center_of(request)
    result: dict[str, Any] = await center.write(center.store.create_access_key, app_id, who)
    return result


@router.get(ACCESS_KEYS)
async def find_access_keys(request: Request, app_id: str, env: str,
                           token: TokenView = Depends(consumer)) -> list[dict[str, Any]]:
    allow(token, app_id)

    def q(s: Session) -> list[dict[str, Any]]:
        Store.app(s, app_id)
        rows = s.scalars(select(m.AccessKey).where(m.AccessKey.app_id == app_id, m.AccessKey.owner.is_(None))
                         .order_by(m.AccessKey.id))  # Apollo's own keys; per-app ones are never listed
        return [dto.access_key_dto(k) for k in rows]

    result: list[dict[str, Any]] = await read(request, q)
    return result


@router.put(ACCESS_KEYS + "/{key_id}/activation")
async def enable_access_key(request: Request, app_id: str, env: str, key_id: int = KeyId,
                            mode: int = Query(0, ge=0, le=1), operator: str | None = None,
                            token: TokenView = Depends(consumer)) -> Response:
    """Enable a key: mode 0 enforces signatures, mode 1 only logs requests that would fail."""
    allow(token, app_id)
    center = center_of(request)
    await center.write(center.store.update_access_key, app_id, key_id, True, mode, operator_of(operator))
    return empty()


@router.put(ACCESS_KEYS + "/{key_id}/deactivation")
async def disable_access_key(request: Request, app_id: str, env: str, key_id: int = KeyId,
                             operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    allow(token, app_id)
    center = center_of(request)
    await center.write(center.store.update_access_key, app_id, key_id, False, 0, operator_of(operator))
    return empty()


@router.delete(ACCESS_KEYS + "/{key_id}")
async def delete_access_key(request: Request, app_id: str, env: str, key_id: int = KeyId,
                            operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    allow(token, app_id)
    center = center_of(request)
    await center.write(center.store.delete_access_key, app_id, key_id, operator_of(operator))
    return empty()


# ----------------------------------------------------------------------------------------------
# per-app keys (ykafka, issue 37): the MetaServer gives each ykafka app its own secret, scoped to the namespaces
# that app may read (keyscope.py). Not in Apollo: a real Apollo has whole-app keys only.
# ----------------------------------------------------------------------------------------------
APP_KEYS = "/apps/{app_id}/appkeys"
Owner = Path(min_length=1, max_length=128, pattern=r"^[0-9A-Za-z_.-]+$")


class AppKeyBody(BaseModel):
    secret: str = Field(min_length=16, max_length=128, pattern=r"^[0-9A-Za-z_-]+$")
    scope: dict[str, Any]


@router.put(APP_KEYS + "/{owner}", status_code=204, response_class=Response)
async def put_app_key(request: Request, app_id: str, body: AppKeyBody, owner: str = Owner,
                      operator: str | None = None, token: TokenView = Depends(consumer)) -> Response:
    """Set ykafka app ``owner``'s key: its secret and scope ({"prefix", "acl", "clusters"}) replace any earlier."""
    allow(token, app_id)
    scope = body.scope
    text = keyscope.scope_json(str(scope.get("prefix") or ""), scope.get("acl") or {},
                               [str(c) for c in scope.get("clusters") or ()])
    center = center_of(request)
    await center.write(center.store.put_app_key, app_id, owner, body.secret, text, operator_of(operator))
    return Response(status_code=204)  # ykafka's own route: no body, and the schema says so


@router.delete(APP_KEYS + "/{owner}", status_code=204, response_class=Response)
async def delete_app_key(request: Request, app_id: str, owner: str = Owner, operator: str | None = None,
                         token: TokenView = Depends(consumer)) -> Response:
    allow(token, app_id)
    center = center_of(request)
    await center.write(center.store.delete_app_key, app_id, owner, operator_of(operator))
    return Response(status_code=204)


@router.get(APP_KEYS)
async def find_app_keys(request: Request, app_id: str, token: TokenView = Depends(consumer)) -> dict[str, Any]:
    """Owner -> scope of every per-app key (no secrets): what the MetaServer's sync compares."""
    allow(token, app_id)
    store = center_of(request).store

    def q(s: Session) -> dict[str, Any]:
        return {owner: json.loads(text) if text else None for owner, text in store.app_keys(s, app_id).items()}

    result: dict[str, Any] = await read(request, q)
    return result
