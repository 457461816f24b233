"""Console pages for apps and ACLs (with "who can produce to T") and the cluster registry with manual
failover / failback (hot config ``route.active`` at ``cluster:<name>``, as ``ykafka admin failover`` does)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select

from metaserver import db, hotconfig, registry
from metaserver.apollo import ApolloError
from metaserver.console import users
from metaserver.console.views import Denied, _api, _audit, _form, _login_redirect, _page, _session, _svc, router
from metaserver.hotconfig import ConfigRejected
from metaserver.models import apps
from ykafka import acl as acl_rules
from ykafka.catalog import Scope, ScopeKind

_OPS: dict[str, acl_rules.Operation] = {op: op for op in acl_rules.OPERATIONS}


@router.get("/apps")
def app_list(request: Request) -> Response:
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    op = _OPS.get(request.query_params.get("op", "produce"), "produce")
    name = request.query_params.get("name", "").strip()[:255]
    with db.read(_svc(request).engine) as conn:
        rows = [dict(r) for r in conn.execute(
            select(apps.c.app_id, apps.c.description, apps.c.default_cluster, apps.c.enabled, apps.c.acl,
                   apps.c.key_generation, apps.c.updated_at).order_by(apps.c.app_id)).mappings()]
    who = None
    if name:
        who = [r["app_id"] for r in rows if r["enabled"] and acl_rules.check(r["acl"] or {}, op, name)]
    return _page(request, "apps.html", sess, rows=rows, op=op, target=name, who=who)


def _writes_to(svc: Any, cluster: str) -> str:
    try:
        released = hotconfig.current(_api(svc), Scope(ScopeKind.CLUSTER, cluster))["released"]
    except (ApolloError, ConfigRejected):
        return "primary"
    return str(released.get("route.active", "primary"))


@router.get("/clusters")
def cluster_list(request: Request) -> Response:
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    svc = _svc(request)
    with db.read(svc.engine) as conn:
        clusters = list(registry.all_clusters(conn).values())
    for c in clusters:
        c["writes_to"] = _writes_to(svc, c["name"]) if c.get("standby") else "primary"
    return _page(request, "clusters.html", sess, clusters=clusters, can_switch=sess.can("admin"))


@router.post("/clusters/failover")
async def cluster_failover(request: Request) -> Response:
    """Move a cluster's writes to its standby, back to the primary (failback sync), or clear the switch."""
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    form = await _form(request, sess, "admin")
    svc = _svc(request)
    to, cluster = form.get("to", ""), form.get("cluster", "")
    try:
        if to not in ("standby", "primary", "clear"):
            raise ConfigRejected({"to": "standby, primary or clear"})
        scope = f"cluster:{cluster}"
        plan = (hotconfig.validate(scope, {}, ["route.active"], None) if to == "clear"
                else hotconfig.validate(scope, {"route.active": to}, [], None))
        api = _api(svc)
        before = hotconfig.plan_changes(api, plan)
        result = hotconfig.apply(api, plan, f"console:{sess.username}", f"failover: writes to {to}")
    except ConfigRejected as exc:
        return _page(request, "error.html", sess, status_code=422, message="; ".join(exc.errors.values()))
    _audit(svc, sess, "cluster.failover", plan.namespace, {"route.active": before.get("route.active")},
           {"to": to, "release": result.get("release")})
    return RedirectResponse("/console/clusters", status_code=303)


@router.get("/users")
def user_list(request: Request) -> Response:
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    if not sess.can("admin"):
        raise Denied()
    return _page(request, "users.html", sess, rows=users.list_users(_svc(request).engine), error=None)


@router.post("/users")
async def user_create(request: Request) -> Response:
    """An admin adds a console user (or resets one's password and role)."""
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    form = await _form(request, sess, "admin")
    svc = _svc(request)
    username, role = form.get("username", "").strip(), form.get("role", "viewer")
    try:
        created = users.create(svc.engine, username, form.get("password", ""), role,
                               replace=form.get("replace") == "1")
        if not created:
            raise users.UserError("that user exists (tick 'reset' to change its password and role)")
    except users.UserError as exc:
        return _page(request, "users.html", sess, status_code=422, rows=users.list_users(svc.engine),
                     error=str(exc))
    _audit(svc, sess, "user.create", username, None, {"role": role})
    return RedirectResponse("/console/users", status_code=303)
