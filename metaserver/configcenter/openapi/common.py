"""Shared parts of the Open API routes: request bodies, token auth, validation helpers, path shapes."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from fastapi import Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.concurrency import run_in_threadpool

from ..center import ConfigCenter
from ..errors import BadRequest, Forbidden, Unauthorized
from ..readmodel import TokenView
from ..store import Store

DEFAULT_ENV = "DEV"
KEY_MAX = 128
VALUE_MAX_BYTES = 64 * 1024
COMMENT_MAX = 256
TITLE_MAX = 64
FORMATS = ("properties", "xml", "json", "yml", "yaml", "txt")
CLUSTER_NAMESPACE_NAME = re.compile(r"^[0-9a-zA-Z_-]+[0-9a-zA-Z_.-]*$")
APP_NAMESPACE_NAME = re.compile(r"^[a-zA-Z0-9_-]+[a-zA-Z0-9._-]*$")
RESERVED_SUFFIX = re.compile(r"\.(json|yml|yaml|xml|properties)$")
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


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore", coerce_numbers_to_str=True)

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        return _reject_surrogates(data)


class OpenAppIn(Body):
    appId: str | None = None
    name: str | None = None
    orgId: str | None = None
    orgName: str | None = None
    ownerName: str | None = None
    ownerEmail: str | None = None
    dataChangeCreatedBy: str | None = None


class OpenCreateAppIn(Body):
    app: OpenAppIn | None = None
    admins: list[str] | None = None
    assignAppRoleToSelf: bool | None = None


class OpenAppNamespaceIn(Body):
    name: str | None = None
    appId: str | None = None
    format: str | None = None
    isPublic: bool | None = None
    appendNamespacePrefix: bool | None = None
    comment: str | None = None
    dataChangeCreatedBy: str | None = None


class OpenClusterIn(Body):
    name: str | None = None
    appId: str | None = None
    comment: str | None = None
    dataChangeCreatedBy: str | None = None


class OpenItemIn(Body):
    key: str | None = None
    value: str | None = None
    type: int | None = Field(None, ge=0, le=3)  # Apollo's ItemType: string, number, boolean, json
    comment: str | None = None
    dataChangeCreatedBy: str | None = None
    dataChangeLastModifiedBy: str | None = None


class NamespaceReleaseIn(Body):
    releaseTitle: str | None = None
    releaseComment: str | None = None
    releasedBy: str | None = None
    isEmergencyPublish: bool | None = None


class NamespaceGrayDelReleaseIn(NamespaceReleaseIn):
    grayDelKeys: list[str] | None = None


class OpenGrayReleaseRuleItemIn(Body):
    clientAppId: str | None = None
    clientIpList: list[str] | None = None
    clientLabelList: list[str] | None = None


class OpenGrayReleaseRuleIn(Body):
    ruleItems: list[OpenGrayReleaseRuleItemIn] | None = None


# ----------------------------------------------------------------------------------------------
# auth and small helpers
# ----------------------------------------------------------------------------------------------
def center_of(request: Request) -> ConfigCenter:
    center: ConfigCenter = request.app.state.center
    return center


async def consumer(request: Request) -> TokenView:
    """ConsumerAuthenticationFilter: the `Authorization` header must be a known Open API token."""
    raw = (request.headers.get("authorization") or "").strip()
    token = raw[7:].strip() if raw.lower().startswith("bearer ") else raw
    center = center_of(request)
    view = center.model.credentials.tokens.get(token) if token else None
    if view is None and token:
        # A token created by the CLI a moment ago: refresh once instead of waiting for the rescan.
        center.model.set_credentials(await run_in_threadpool(center.store.load_credentials))
        view = center.model.credentials.tokens.get(token)
    if view is None:
        raise Unauthorized("Unauthorized")
    return view


def allow(token: TokenView, app_id: str) -> None:
    if not token.may_manage(app_id):
        raise Forbidden("Access is denied")


def operator_of(query: str | None, payload: str | None = None) -> str:
    operator = query if query and query.strip() else payload
    if not operator or not operator.strip():
        raise BadRequest("operator should not be null or empty")
    return operator.strip()


def empty() -> Response:
    return Response(status_code=200)


def check_item(key: str | None, value: str | None, comment: str | None) -> tuple[str, str]:
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


def check_release(body: NamespaceReleaseIn, operator: str | None) -> tuple[str, str, str]:
    releaser = operator if operator and operator.strip() else body.releasedBy
    if not body.releaseTitle or not releaser or not releaser.strip():
        raise BadRequest("Params(releaseTitle and releasedBy) can not be empty")
    if len(body.releaseTitle) > TITLE_MAX:
        raise BadRequest("releaseTitle length should not exceed %s characters", TITLE_MAX)
    comment = body.releaseComment or ""
    if len(comment) > COMMENT_MAX:
        raise BadRequest("releaseComment length should not exceed %s characters", COMMENT_MAX)
    return body.releaseTitle, comment, releaser.strip()


def decode_key(encoded: str) -> str:
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


async def read(request: Request, fn: Any) -> Any:
    store: Store = center_of(request).store
    return await run_in_threadpool(store.read, fn)


NS = "/envs/{env}/apps/{app_id}/clusters/{cluster}/namespaces/{namespace}"
MAX_ID = 2**63 - 1
Page = Query(0, ge=0, le=1_000_000)
ReleaseId = Path(ge=1, le=MAX_ID)
BRANCH = NS + "/branches/{branch}"
