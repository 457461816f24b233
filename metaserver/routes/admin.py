"""Admin API: apps and secrets, ACLs, the cluster registry, client views and the audit trail.

Every call needs ``Authorization: Bearer <admin token>``; every change is audited inside the same
transaction as the change itself (who: ``X-Ykafka-Operator`` or the token's name).
"""

from __future__ import annotations

import hmac
import secrets
import time
from typing import Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import Connection, RowMapping, delete, select, update

from ykafka import acl as acl_patterns
from ykafka import signing

from ..domain import audit, authswitch, clients, configkeys, credentials, placements, ratelimit, reach, registry
from ..domain.auth import AuthFailed, RateLimited
from ..domain.sealing import Sealer
from ..kafka import view as kafka_view
from ..schemas import Acl, AppCreate, AppUpdate, ClusterPut, SecuritySwitches
from ..services import Services, services
from ..storage import db
from ..storage.models import apps, clusters


def operator(request: Request, authorization: str | None = Header(default=None),
             x_ykafka_operator: str | None = Header(default=None)) -> str:
    """FastAPI dependency: the admin's name for the audit trail, or 401.

    No token at all is a 401 that is not counted (it guesses nothing; see auth.check_bearer): only a wrong
    token counts against its source."""
    svc: Services = request.app.state.services
    settings = svc.settings
    token = authorization[7:].strip() if authorization and authorization[:7].lower() == "bearer " else ""
    if not token:
        raise AuthFailed("no admin token")
    source = request.client.host if request.client else None
    now = time.time()
    with db.read(svc.engine) as conn:  # token guessing is rate-limited per source like bad signatures
        if ratelimit.blocked(conn, None, source, now, settings.auth_fail_limit, settings.auth_fail_window_s):
            raise RateLimited(max(1, int(settings.auth_fail_window_s - now % settings.auth_fail_window_s) + 1))
    for name, expected in settings.admin_tokens.items():
        if hmac.compare_digest(token.encode(), expected.encode()):
            return (x_ykafka_operator or name).strip()[:255] or name
    ratelimit.record_failure(svc.engine, None, source, now, settings.auth_fail_window_s)
    raise AuthFailed("bad admin token")


router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[Depends(operator)])


def _not_found(what: str) -> HTTPException:
    return HTTPException(status_code=404, detail=f"{what} not found")


# --- apps ------------------------------------------------------------------------------------


def app_json(row: RowMapping) -> dict[str, Any]:
    return {"app_id": row["app_id"], "description": row["description"], "default_cluster": row["default_cluster"],
            "enabled": row["enabled"], "acl": row["acl"], "key_generation": row["key_generation"],
            "created_at": row["created_at"], "updated_at": row["updated_at"]}


def _get_app(conn: Connection, app_id: str) -> RowMapping:
    row = conn.execute(select(apps).where(apps.c.app_id == app_id)).mappings().first()
    if row is None:
        raise _not_found(f"app {app_id!r}")
    return row


def _check_cluster_exists(conn: Connection, name: str | None, field: str) -> None:
    if name and conn.execute(select(clusters.c.name).where(clusters.c.name == name)).first() is None:
        raise HTTPException(status_code=422, detail=f"{field}: cluster {name!r} is not in the registry")


@router.get("/apps")
def list_apps(svc: Services = Depends(services)) -> list[dict[str, Any]]:
    with db.read(svc.engine) as conn:
        return [app_json(row) for row in conn.execute(select(apps).order_by(apps.c.app_id)).mappings()]


@router.get("/apps/{app_id}")
def get_app(app_id: str, svc: Services = Depends(services)) -> dict[str, Any]:
    with db.read(svc.engine) as conn:
        return app_json(_get_app(conn, app_id))


def insert_app(conn: Connection, who: str, app_id: str, description: str = "", default_cluster: str | None = None,
               acl: dict[str, list[str]] | None = None, *, sealer: Sealer) -> dict[str, Any]:
    """Create an app (audited in ``conn``'s transaction); the answer carries its secret, shown only this once.
    409 when it exists, 422 for an unknown default cluster."""
    secret = secrets.token_urlsafe(32)
    now = time.time()
    key = signing.derive_key(app_id, secret)
    if conn.execute(select(apps.c.app_id).where(apps.c.app_id == app_id)).first() is not None:
        raise HTTPException(status_code=409, detail=f"app {app_id!r} already exists")
    _check_cluster_exists(conn, default_cluster, "default_cluster")
    conn.execute(apps.insert().values(app_id=app_id, signing_key=sealer.seal_signing_key(key), key_generation=1,
                                      description=description,
                                      default_cluster=default_cluster, enabled=True, acl=acl or Acl().model_dump(),
                                      created_at=now, updated_at=now))
    row = _get_app(conn, app_id)
    audit.record(conn, who, "app.create", f"app:{app_id}", None, app_json(row))
    return {**app_json(row), "secret": secret}


def issue_principals(svc: Services, app_id: str, also: list[str] | None = None) -> None:
    """Give a registered (or approved) app its SCRAM principal on each secured cluster it can reach (and on
    ``also``: a cluster an approval just routed it to), and have the reconciler put them and their ACL bindings
    on the brokers."""
    with db.read(svc.engine) as conn:
        app = dict(_get_app(conn, app_id))
        registry_ = registry.all_clusters(conn)
    configkeys.refresh(svc, app_id)  # its config-center key: retired if disabled, else its new scope pushed
    if not app["enabled"]:  # disabled: its principals leave the brokers at the pass this kicks
        svc.reconciler.kick()
        return
    default = registry.default_cluster(app["default_cluster"], svc.settings.default_cluster, registry_)
    reachable = reach.grant_clusters(svc.routes, app["acl"] or {}, default, registry_, [],
                                     lambda topic: placements.lookup_on(svc.engine, topic))
    secured = [name for name, spec in reachable.items() if credentials.secured(spec)]
    secured += [name for name in also or [] if name in registry_ and credentials.secured(registry_[name])]
    if secured:
        with db.write(svc.engine) as conn:
            credentials.ensure(conn, app_id, secured, svc.box)
    svc.reconciler.kick()


@router.post("/apps", status_code=201)
def create_app_(body: AppCreate, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Create an app; the answer carries its secret, the only time it is ever shown. On secured clusters it
    reaches, it gets its own SCRAM principal and the ACL bindings of its ACL."""
    with db.write(svc.engine) as conn:
        made = insert_app(conn, who, body.app_id, body.description, body.default_cluster,
                          (body.acl or Acl()).model_dump(), sealer=svc.sealer)
    issue_principals(svc, body.app_id)
    return made


@router.patch("/apps/{app_id}")
def update_app(app_id: str, body: AppUpdate, who: str = Depends(operator),
               svc: Services = Depends(services)) -> dict[str, Any]:
    changes = body.model_dump(exclude_unset=True)
    with db.write(svc.engine) as conn:
        before = app_json(_get_app(conn, app_id))
        if changes.get("default_cluster"):
            _check_cluster_exists(conn, changes["default_cluster"], "default_cluster")
        if changes.get("description") is None:
            changes.pop("description", None)
        if changes.get("enabled") is None:
            changes.pop("enabled", None)
        conn.execute(update(apps).where(apps.c.app_id == app_id).values(**changes, updated_at=time.time()))
        if changes.get("enabled") is False and before["enabled"]:
            # its passwords retire now, not kept for a later enable to revive: the next generation (new passwords,
            # new usernames, so no broker ever confuses the two) is what an enable provisions
            credentials.rotate(conn, app_id, svc.box, 0.0)
        after = app_json(_get_app(conn, app_id))
        audit.record(conn, who, "app.update", f"app:{app_id}", before, after)
    issue_principals(svc, app_id)  # a disabled app's principals leave the brokers at this pass
    return after


@router.delete("/apps/{app_id}", status_code=204)
def delete_app(app_id: str, who: str = Depends(operator), svc: Services = Depends(services)) -> None:
    with db.write(svc.engine) as conn:
        before = app_json(_get_app(conn, app_id))
        conn.execute(delete(apps).where(apps.c.app_id == app_id))
        credentials.revoke(conn, app_id)
        audit.record(conn, who, "app.delete", f"app:{app_id}", before, None)
    configkeys.refresh(svc, app_id)  # its config-center key leaves the config service now
    svc.reconciler.kick()


def new_secret(conn: Connection, who: str, app_id: str, *, sealer: Sealer) -> dict[str, Any]:
    """A new secret for an app (audited in ``conn``'s transaction), shown only in this answer. Its Kafka
    principals are left alone: clients holding the old secret can no longer renew, so the secret's holders
    change; rotate those with ``rotate-credentials``."""
    secret = secrets.token_urlsafe(32)
    key = signing.derive_key(app_id, secret)
    before = app_json(_get_app(conn, app_id))
    conn.execute(update(apps).where(apps.c.app_id == app_id).values(
        signing_key=sealer.seal_signing_key(key), key_generation=apps.c.key_generation + 1, updated_at=time.time()))
    after = app_json(_get_app(conn, app_id))
    audit.record(conn, who, "app.rotate_secret", f"app:{app_id}",
                 {"key_generation": before["key_generation"]}, {"key_generation": after["key_generation"]})
    return {**after, "secret": secret}


@router.post("/apps/{app_id}/rotate-secret")
def rotate_secret(app_id: str, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """A new secret (shown once); the old one stops signing at once and its tokens stop renewing, and its
    config-center key is retired with it (the next grant mints a new one)."""
    with db.write(svc.engine) as conn:
        made = new_secret(conn, who, app_id, sealer=svc.sealer)
    configkeys.refresh(svc, app_id)
    return made


@router.post("/apps/{app_id}/rotate-credentials")
def rotate_credentials(app_id: str, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """New Kafka credentials for the app on every cluster where it has a principal. Running clients pick
    them up at their next renewal and reconnect with them; the old ones are deleted from the brokers after
    ``--credential-grace`` seconds."""
    grace = svc.settings.credential_grace
    with db.write(svc.engine) as conn:
        _get_app(conn, app_id)
        rotated = credentials.rotate(conn, app_id, svc.box, grace)
        audit.record(conn, who, "app.rotate_credentials", f"app:{app_id}", None,
                     {"clusters": rotated, "old_valid_s": grace})
    svc.reconciler.kick()
    return {"app_id": app_id, "clusters": rotated, "old_valid_s": grace}


@router.get("/apps/{app_id}/kafka")
def app_kafka(app_id: str, svc: Services = Depends(services)) -> dict[str, Any]:
    """The app's principals per cluster, and on each cluster the bindings it should have against those in
    force at the last reconcile (no passwords)."""
    with db.read(svc.engine) as conn:
        return kafka_view.app_view(conn, dict(_get_app(conn, app_id)))

# --- ACL -------------------------------------------------------------------------------------


@router.get("/apps/{app_id}/acl")
def get_acl(app_id: str, svc: Services = Depends(services)) -> dict[str, Any]:
    with db.read(svc.engine) as conn:
        return dict(_get_app(conn, app_id)["acl"])


def replace_acl(conn: Connection, who: str, app_id: str, acl: dict[str, list[str]]) -> dict[str, list[str]]:
    """Replace an app's ACL (already validated; audited in ``conn``'s transaction); clients get it at their
    next renewal."""
    before = dict(_get_app(conn, app_id)["acl"])
    conn.execute(update(apps).where(apps.c.app_id == app_id).values(acl=acl, updated_at=time.time()))
    audit.record(conn, who, "acl.set", f"app:{app_id}", before, acl)
    return acl


@router.put("/apps/{app_id}/acl")
def put_acl(app_id: str, body: Acl, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Replace the app's ACL; running clients get it at their next renewal."""
    with db.write(svc.engine) as conn:
        saved = dict(replace_acl(conn, who, app_id, body.model_dump()))
    issue_principals(svc, app_id)  # the new ACL may reach more clusters; bindings follow at this pass
    return saved


# --- security switches -------------------------------------------------------------------------


@router.get("/security")
def get_security(svc: Services = Depends(services)) -> dict[str, Any]:
    """The security switches in force (``auth.enabled``); they live in this database, never in a config namespace."""
    return authswitch.read_all(svc.engine)


@router.put("/security")
def put_security(body: SecuritySwitches, who: str = Depends(operator),
                 svc: Services = Depends(services)) -> dict[str, Any]:
    """The only way to change a security switch (issue 37: the config service's Open API token once could): the
    change and its audit row (``security.set``) commit together; every MetaServer on this database applies it
    within ``--auth-switch-ttl`` seconds, this one at once."""
    values = {name: value for name, value in body.model_dump(by_alias=True).items() if value is not None}
    after = authswitch.write(svc.engine, who, values)
    svc.auth_switch.refresh()
    return after


# --- clusters --------------------------------------------------------------------------------


@router.get("/clusters")
def list_clusters(svc: Services = Depends(services)) -> list[dict[str, Any]]:
    with db.read(svc.engine) as conn:
        return list(registry.all_clusters(conn).values())


@router.get("/clusters/{name}")
def get_cluster(name: str, svc: Services = Depends(services)) -> dict[str, Any]:
    with db.read(svc.engine) as conn:
        row = conn.execute(select(clusters).where(clusters.c.name == name)).mappings().first()
        if row is None:
            raise _not_found(f"cluster {name!r}")
        return registry.cluster_json(row)


@router.put("/clusters/{name}")
def put_cluster(name: str, body: ClusterPut, who: str = Depends(operator),
                svc: Services = Depends(services)) -> dict[str, Any]:
    """Create or replace a registry entry (name, bootstrap servers, DC, standby, status, SASL).

    The standby may name a cluster registered later (two clusters can be each other's standby).
    """
    problem = acl_patterns.name_problem(name)
    if problem is not None:
        raise HTTPException(status_code=422, detail=f"cluster name: {problem}")
    if body.standby == name:
        raise HTTPException(status_code=422, detail="standby: a cluster cannot be its own standby")
    security = body.security
    if security is not None and security.protocol == "SASL_SSL" and not security.ca_pem:
        raise HTTPException(status_code=422, detail="security.ca_pem: SASL_SSL needs the CA that signed the brokers")
    values = {"name": name, "bootstrap_servers": body.bootstrap_servers, "dc": body.dc, "standby": body.standby,
              "status": body.status, "security_protocol": security.protocol if security else "PLAINTEXT",
              "sasl_mechanism": security.mechanism if security else None,
              "ssl_ca": security.ca_pem if security else None, "updated_at": time.time()}
    with db.write(svc.engine) as conn:
        row = conn.execute(select(clusters).where(clusters.c.name == name)).mappings().first()
        before = registry.cluster_json(row) if row else None
        db.upsert(conn, clusters, values, ["name"])
        after = registry.cluster_json(conn.execute(select(clusters).where(clusters.c.name == name)).mappings().one())
        audit.record(conn, who, "cluster.create" if before is None else "cluster.update", f"cluster:{name}",
                     before, after)
    svc.reconciler.kick()
    return after


@router.delete("/clusters/{name}", status_code=204)
def delete_cluster(name: str, who: str = Depends(operator), svc: Services = Depends(services)) -> None:
    with db.write(svc.engine) as conn:
        row = conn.execute(select(clusters).where(clusters.c.name == name)).mappings().first()
        if row is None:
            raise _not_found(f"cluster {name!r}")
        users = conn.execute(select(clusters.c.name).where(clusters.c.standby == name)).scalars().all()
        if users:
            raise HTTPException(status_code=409, detail=f"cluster {name!r} is the standby of {sorted(users)}")
        conn.execute(delete(clusters).where(clusters.c.name == name))
        revoked = credentials.revoke_cluster(conn, name)
        audit.record(conn, who, "cluster.delete", f"cluster:{name}", registry.cluster_json(row),
                     {"principals_revoked": revoked} if revoked else None)
    spec = registry.cluster_json(row)
    if credentials.secured(spec):  # its principals and bindings leave the brokers, retried until they answer
        svc.reconciler.retire(name, spec)


# --- clients and audit -----------------------------------------------------------------------


def _next_link(request: Request, response: Response, rows: list[dict[str, Any]], limit: int,
               cursor: dict[str, str]) -> None:
    """A full page gets ``Link: <…>; rel="next"`` (RFC 8288) with the cursor of its last row: the body stays a
    list (what ``ykafka admin`` and scripts read), and no request reads more than ``limit`` rows."""
    if len(rows) == limit:
        url = request.url.remove_query_params(list(cursor)).include_query_params(**cursor)
        response.headers["Link"] = f'<{url.path}?{url.query}>; rel="next"'


@router.get("/clients")
def list_clients(request: Request, response: Response, app: str | None = None, cluster: str | None = None,
                 librdkafka: str | None = Query(default=None, description="exact version, or a prefix ending in *"),
                 group: str | None = None, online: bool | None = None, limit: int = Query(default=1000, ge=1, le=10000),
                 after_app: str | None = Query(default=None, max_length=200,
                                               description="page on: the app id of the last row seen"),
                 after_client: str | None = Query(default=None, max_length=200,
                                                  description="page on: the client id of the last row seen"),
                 svc: Services = Depends(services)) -> list[dict[str, Any]]:
    """The real-time view: one row per client with last seen and whether it is online (3 heartbeats), in key
    order; a full page links the next one (``Link`` header, ``after_app`` + ``after_client``)."""
    if (after_app is None) != (after_client is None):
        raise HTTPException(status_code=400, detail="after_app and after_client go together")
    after = (after_app, after_client) if after_app is not None and after_client is not None else None
    with db.read(svc.engine) as conn:
        rows = clients.current(conn, svc.settings.renew_interval, app, cluster, librdkafka, group, online, limit,
                               after)
    if rows:
        _next_link(request, response, rows, limit, {"after_app": rows[-1]["app_id"],
                                                    "after_client": rows[-1]["client_id"]})
    return rows


@router.get("/clients/history")
def client_history(request: Request, response: Response, app: str | None = None, cluster: str | None = None,
                   librdkafka: str | None = None, group: str | None = None, client_id: str | None = None,
                   since: float | None = None, limit: int = Query(default=1000, ge=1, le=10000),
                   before: int | None = Query(default=None, ge=1, description="page on: ids below this one"),
                   svc: Services = Depends(services)) -> list[dict[str, Any]]:
    """Reports that changed something (and the first of each client), newest first; a full page links the
    next one (``Link`` header, ``before``)."""
    with db.read(svc.engine) as conn:
        rows = clients.history(conn, app, cluster, librdkafka, group, client_id, since, limit, before)
    if rows:
        _next_link(request, response, rows, limit, {"before": str(rows[-1]["id"])})
    return rows


@router.get("/audit")
def get_audit(operator_: str | None = Query(default=None, alias="operator"), action: str | None = None,
              target: str | None = None, since: float | None = None,
              limit: int = Query(default=100, ge=1, le=10000), svc: Services = Depends(services)) -> JSONResponse:
    with db.read(svc.engine) as conn:
        return JSONResponse(audit.query(conn, operator_, action, target, since, limit))
