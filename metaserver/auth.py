"""Signed grants, renewals and bearer checks: the MetaServer's gate in front of every cluster.

Failures raise :class:`AuthFailed` whatever the cause (the answer never says which part failed; the
log does) and count against the app and the source IP; too many in a window raise :class:`RateLimited`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any

import structlog
from sqlalchemy import RowMapping, delete, select

from metaserver import db, ratelimit, registry
from metaserver.models import apps, nonces
from metaserver.services import Services
from metaserver.tokens import TokenClaims
from ykafka import signing
from ykafka.catalog import NAMESPACE_PREFIX

log = structlog.get_logger("metaserver.auth")


class AuthFailed(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class RateLimited(Exception):
    def __init__(self, retry_after_s: int) -> None:
        self.retry_after_s = retry_after_s
        super().__init__("too many failed authentications")


def _retry_after(svc: Services, now: float) -> int:
    window = svc.settings.auth_fail_window_s
    return max(1, int(window - now % window) + 1)


def signed_grant(svc: Services, headers: Mapping[str, str], method: str, path: str, body: bytes,
                 app_id: str, client_id: str, source_ip: str | None) -> dict[str, Any]:
    """Check a signed grant request and answer the grant (token, ACL, registry, config-center)."""
    settings = svc.settings
    now = time.time()
    auth_on = svc.auth_switch.enabled()
    try:
        with db.write(svc.engine) as conn:
            if ratelimit.blocked(conn, app_id, source_ip, now, settings.auth_fail_limit, settings.auth_fail_window_s):
                raise RateLimited(_retry_after(svc, now))
            app = conn.execute(select(apps).where(apps.c.app_id == app_id)).mappings().first()
            if app is None or not app["enabled"]:
                raise AuthFailed("unknown or disabled app")
            if auth_on:
                nonce, expires_at = _check_signature(svc, app, headers, method, path, body, now)
                if not db.insert_ignore(conn, nonces, {"app_id": app_id, "nonce": nonce, "expires_at": expires_at},
                                        ["app_id", "nonce"]):
                    raise AuthFailed("nonce replayed")
                if random.random() < 0.01:
                    conn.execute(delete(nonces).where(nonces.c.expires_at < now))
            else:
                log.warning("auth disabled: grant issued without checking the signature", app_id=app_id,
                            client_id=client_id, source_ip=source_ip)
            clusters = registry.all_clusters(conn)
    except AuthFailed as exc:
        log.info("grant refused", app_id=app_id, client_id=client_id, source_ip=source_ip, reason=exc.reason)
        ratelimit.record_failure(svc.engine, app_id, source_ip, now, settings.auth_fail_window_s)
        raise
    return build_grant(svc, app, client_id, clusters, now)


def _check_signature(svc: Services, app: RowMapping, headers: Mapping[str, str], method: str, path: str,
                     body: bytes, now: float) -> tuple[str, float]:
    header_app = headers.get(signing.HEADER_APP)
    timestamp = headers.get(signing.HEADER_TIMESTAMP)
    nonce = headers.get(signing.HEADER_NONCE)
    signature = headers.get(signing.HEADER_SIGNATURE)
    if not (header_app and timestamp and nonce and signature):
        raise AuthFailed("missing signature headers")
    if header_app != app["app_id"]:
        raise AuthFailed("header app differs from body app")
    if not 8 <= len(nonce) <= 128:
        raise AuthFailed("bad nonce")
    try:
        timestamp_s = int(timestamp) / 1000.0
    except ValueError:
        raise AuthFailed("bad timestamp") from None
    window = svc.settings.auth_window_s
    if abs(now - timestamp_s) > window:
        raise AuthFailed("stale timestamp")
    if not signing.verify(bytes(app["signing_key"]), method, path, body, timestamp, nonce, signature):
        raise AuthFailed("bad signature")
    return nonce, timestamp_s + window


def check_bearer(svc: Services, authorization: str | None, source_ip: str | None) -> TokenClaims:
    """Claims of the bearer token, or AuthFailed / RateLimited (bad tokens count per source IP)."""
    token = ""
    if authorization and authorization[:7].lower() == "bearer ":
        token = authorization[7:].strip()
    claims = svc.tokens.verify(token) if token else None
    if claims is None:
        now = time.time()
        settings = svc.settings
        with db.read(svc.engine) as conn:
            if ratelimit.blocked(conn, None, source_ip, now, settings.auth_fail_limit, settings.auth_fail_window_s):
                raise RateLimited(_retry_after(svc, now))
        ratelimit.record_failure(svc.engine, None, source_ip, now, settings.auth_fail_window_s)
        raise AuthFailed("invalid or expired token")
    return claims


def renew(svc: Services, claims: TokenClaims) -> dict[str, Any]:
    """A fresh grant for the holder of an unexpired token: current ACL and registry, new token."""
    with db.read(svc.engine) as conn:
        app = conn.execute(select(apps).where(apps.c.app_id == claims.app_id)).mappings().first()
        if app is None or not app["enabled"] or app["key_generation"] != claims.generation:
            raise AuthFailed("app gone, disabled or secret rotated")
        clusters = registry.all_clusters(conn)
    return build_grant(svc, app, claims.client_id, clusters, time.time())


def build_grant(svc: Services, app: RowMapping, client_id: str, clusters: dict[str, dict[str, Any]],
                now: float) -> dict[str, Any]:
    settings = svc.settings
    token, expires_at = svc.tokens.issue(app["app_id"], client_id, app["key_generation"], settings.token_ttl, now)
    acl = app["acl"] or {}
    return {
        "app_id": app["app_id"],
        "token": token,
        "expires_at": expires_at,
        "renew_interval_s": settings.renew_interval,
        "acl": {"produce": list(acl.get("produce", [])), "consume": list(acl.get("consume", [])),
                "group": list(acl.get("group", []))},
        "clusters": clusters,
        "default_cluster": registry.default_cluster(app["default_cluster"], settings.default_cluster, clusters),
        "configcenter": {
            "url": settings.configcenter_url,
            "app_id": settings.apollo_app_id,
            "cluster": settings.apollo_cluster,
            "namespace_prefix": NAMESPACE_PREFIX,
            "access_key_secret": settings.configcenter_access_key_secret,
        },
    }
