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
from sqlalchemy import select

from ykafka import signing
from ykafka.catalog import NAMESPACE_PREFIX
from ykafka.grants import grant_json

from ..services import Services
from ..storage import db, hotpath
from ..storage.models import apps, kafka_reconciles
from . import configkeys, credentials, placements, ratelimit, reach, registry
from .tokens import TokenClaims

Wants = list[tuple[str, str]]  # (namespace, cluster) pairs a client asks to have confirmed

log = structlog.get_logger("metaserver.domain.auth")

#: how long a grant that issued an app's first principal on a cluster waits for the brokers to know it
PROVISION_WAIT_S = 10.0


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
                 app_id: str, client_id: str, source_ip: str | None, wants: Wants | None = None) -> dict[str, Any]:
    """Check a signed grant request and answer the grant (token, ACL, registry, config-center)."""
    settings = svc.settings
    now = time.time()
    auth_on = svc.auth_switch.enabled()
    window_s = settings.auth_fail_window_s
    dialect = svc.engine.dialect.name
    try:
        raw = svc.engine.raw_connection()
        try:
            cur = raw.cursor()
            # reads first; the one write (the nonce) is a single short statement afterwards, so SQLite's
            # write lock is held for microseconds rather than for the whole request
            failures = hotpath.rows(cur, dialect, hotpath.FAILURES, {
                "window_start": int(now // window_s) * window_s, "ip": source_ip or "",
                "app_id": ratelimit.app_subject(app_id, source_ip)})
            if any(count >= settings.auth_fail_limit for (count,) in failures):
                raise RateLimited(_retry_after(svc, now))
            found = hotpath.rows(cur, dialect, hotpath.APP, {"app_id": app_id})
            clusters = {row[0]: _cluster(row) for row in hotpath.rows(cur, dialect, hotpath.CLUSTERS, {})}
            raw.commit()
            if not found or not found[0][3]:
                raise AuthFailed("unknown or disabled app")
            app = {"app_id": found[0][0], "signing_key": bytes(found[0][1]), "key_generation": found[0][2],
                   "acl": hotpath.json_value(found[0][4]), "default_cluster": found[0][5]}
            if auth_on:
                nonce, expires_at = _check_signature(svc, app, headers, method, path, body, now)
                inserted = hotpath.rows(cur, dialect, hotpath.NONCE,
                                        {"app_id": app_id, "nonce": nonce, "expires_at": expires_at})
                if random.random() < 0.002:
                    hotpath.rows(cur, dialect, hotpath.PURGE_NONCES, {"now": now})
                raw.commit()
                if not inserted:
                    raise AuthFailed("nonce replayed")
            else:
                log.warning("auth disabled: grant issued without checking the signature", app_id=app_id,
                            client_id=client_id, source_ip=source_ip)
        finally:
            raw.close()  # back to the pool (rolled back if anything is left open)
    except AuthFailed as exc:
        log.info("grant refused", app_id=app_id, client_id=client_id, source_ip=source_ip, reason=exc.reason)
        ratelimit.record_failure(svc.engine, app_id, source_ip, now, window_s)
        raise
    return build_grant(svc, app, client_id, clusters, now, wants or [])


def _cluster(row: Any) -> dict[str, Any]:
    return {"name": row[0], "bootstrap_servers": row[1], "dc": row[2], "standby": row[3], "status": row[4],
            "security": registry.security_json(row[6], row[5], row[7])}


def _check_signature(svc: Services, app: Mapping[str, Any], headers: Mapping[str, str], method: str, path: str,
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
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 16):  # ms since the epoch
        raise AuthFailed("bad timestamp")  # counted like any bad signature (a 400-digit one overflowed a float)
    timestamp_s = int(timestamp) / 1000.0
    window = svc.settings.auth_window_s
    if abs(now - timestamp_s) > window:
        raise AuthFailed("stale timestamp")
    key = svc.sealer.signing_key(bytes(app["signing_key"]))  # sealed outside the database (domain/sealing.py)
    if key is None or not signing.verify(key, method, path, body, timestamp, nonce, signature):
        raise AuthFailed("bad signature")
    return nonce, timestamp_s + window


def check_bearer(svc: Services, authorization: str | None, source_ip: str | None) -> TokenClaims:
    """Claims of the bearer token, or AuthFailed / RateLimited (bad tokens count per source IP).

    A request with no token at all is refused without counting: it guesses nothing, and counting it let anything
    that merely knocks (a crawler, a health checker pointed at the wrong path, an attacker's port sweep) lock the
    operators' own tools out of the admin API from a shared source address (docs/metaserver.md, "Threat model").
    """
    token = ""
    if authorization and authorization[:7].lower() == "bearer ":
        token = authorization[7:].strip()
    if not token:
        raise AuthFailed("no token")
    claims = svc.tokens.verify(token)
    if claims is None:
        now = time.time()
        settings = svc.settings
        with db.read(svc.engine) as conn:
            if ratelimit.blocked(conn, None, source_ip, now, settings.auth_fail_limit, settings.auth_fail_window_s):
                raise RateLimited(_retry_after(svc, now))
        ratelimit.record_failure(svc.engine, None, source_ip, now, settings.auth_fail_window_s)
        raise AuthFailed("invalid or expired token")
    return claims


def renew(svc: Services, claims: TokenClaims, wants: Wants | None = None) -> dict[str, Any]:
    """A fresh grant for the holder of an unexpired token: current ACL and registry, new token."""
    with db.read(svc.engine) as conn:
        app = conn.execute(select(apps).where(apps.c.app_id == claims.app_id)).mappings().first()
        if app is None or not app["enabled"] or app["key_generation"] != claims.generation:
            raise AuthFailed("app gone, disabled or secret rotated")
        clusters = registry.all_clusters(conn)
    return build_grant(svc, dict(app), claims.client_id, clusters, time.time(), wants or [])


def with_credentials(svc: Services, app_id: str, reachable: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The reachable clusters, each secured one with this app's own principal (issued here on first reach)."""
    secured = [name for name, spec in reachable.items() if credentials.secured(spec)]
    with db.read(svc.engine) as conn:
        creds = credentials.for_grant(conn, app_id, svc.box)
        # a cluster whose last pass failed is not waited for on every start (it may be down for long)
        failing = set(conn.execute(select(kafka_reconciles.c.cluster).where(~kafka_reconciles.c.ok)).scalars())
        pending = [c for c in credentials.unprovisioned(conn, app_id, secured) if c not in failing]
    if set(secured) - set(creds):
        with db.write(svc.engine) as conn:
            pending += credentials.ensure(conn, app_id, secured, svc.box)
            creds = credentials.for_grant(conn, app_id, svc.box)
    # the broker must know a principal before it is used: one issued here, or by an admin call (app created,
    # ACL changed, secret rotated) whose reconcile pass has not run yet
    if pending and svc.settings.kafka_admin_user and not svc.reconciler.kick_and_wait(PROVISION_WAIT_S):
        log.warning("new principals not yet on the brokers", app_id=app_id, clusters=pending)
    out: dict[str, dict[str, Any]] = {}
    for name, spec in reachable.items():
        security = spec.get("security")
        if security and name in creds:
            user, password = creds[name]
            spec = {**spec, "sasl": {"mechanism": security["mechanism"], "username": user, "password": password,
                                     "security_protocol": security["protocol"], "ca_pem": security.get("ca_pem")}}
        out[name] = spec
    return out


def build_grant(svc: Services, app: Mapping[str, Any], client_id: str, clusters: dict[str, dict[str, Any]],
                now: float, wants: Wants) -> dict[str, Any]:
    """The grant: only the clusters this app can reach, with credentials only for those (metaserver/domain/reach.py)."""
    settings = svc.settings
    token, expires_at = svc.tokens.issue(app["app_id"], client_id, app["key_generation"], settings.token_ttl, now)
    acl = app["acl"] or {}
    default = registry.default_cluster(app["default_cluster"], settings.default_cluster, clusters)
    reachable = reach.grant_clusters(svc.routes, acl, default, clusters, wants,
                                     lambda topic: placements.lookup_on(svc.engine, topic))
    if any(credentials.secured(spec) for spec in reachable.values()):
        reachable = with_credentials(svc, app["app_id"], reachable)
    # the app's own config-center key, scoped to what it may read; never the config service's shared secret
    key = configkeys.for_grant(svc, app, reachable) if settings.app_keys else None
    return grant_json(
        app_id=app["app_id"], token=token, expires_at=expires_at, renew_interval_s=settings.renew_interval,
        acl=acl, clusters=reachable, default_cluster=default, issuer=svc.issuer,
        placements=placements.any_placed(svc.engine),
        configcenter={"url": settings.configcenter_url, "app_id": settings.apollo_app_id,
                      "cluster": settings.apollo_cluster, "namespace_prefix": NAMESPACE_PREFIX,
                      "access_key_secret": key})
