"""Console pages for apps and ACLs (with "who can produce to T") and the cluster registry with manual
failover / failback (hot config ``route.active`` at ``cluster:<name>``, as ``ykafka admin failover`` does)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy import select

from ykafka import acl as acl_rules

from ..domain import audit, configwrites, hotconfig, registry
from ..domain.hotconfig import ConfigRejected
from ..kafka import view as kafka_view
from ..routes import admin as routes_admin
from ..storage import db
from ..storage.models import apps
from . import provision, users
from .config_views import off_loop
from .overview_views import writes_to
from .views import Denied, _audit, _form, _page, _signed_in, _svc, required, router

_OPS: dict[str, acl_rules.Operation] = {op: op for op in acl_rules.OPERATIONS}


def _apps(svc: Any) -> list[dict[str, Any]]:
    with db.read(svc.engine) as conn:
        return [dict(r) for r in conn.execute(
            select(apps.c.app_id, apps.c.description, apps.c.default_cluster, apps.c.enabled, apps.c.acl,
                   apps.c.key_generation, apps.c.updated_at).order_by(apps.c.app_id)).mappings()]


def _cluster_names(svc: Any) -> list[str]:
    with db.read(svc.engine) as conn:
        return sorted(registry.all_clusters(conn))


def _apps_page(request: Request, sess: users.Session, status_code: int = 200, **ctx: Any) -> Response:
    svc = _svc(request)
    op = _OPS.get(request.query_params.get("op", "produce"), "produce")
    name = request.query_params.get("name", "").strip()[:255]
    rows = _apps(svc)
    who = None
    if name:
        who = [r["app_id"] for r in rows if r["enabled"] and acl_rules.check(r["acl"] or {}, op, name)]
    ctx.setdefault("error", None)
    resp = _page(request, "apps.html", sess, status_code=status_code, rows=rows, op=op, target=name, who=who,
                 can_admin=sess.can("admin"), clusters=_cluster_names(svc), **ctx)
    resp.headers["Cache-Control"] = "no-store"  # a page may carry a secret shown once
    return resp


@router.get("/apps")
def app_list(request: Request) -> Response:
    sess = _signed_in(request)
    return _apps_page(request, sess)


def _patterns(text: str, topics: bool = False) -> tuple[list[str], list[str]]:
    """Patterns from a comma / space separated field, and the problems found (``ykafka.acl`` rules; a topic
    pattern may not reach into the groups' retry namespace, as the admin API refuses)."""
    found = [p.strip() for p in text.replace(",", " ").split() if p.strip()]
    rule = acl_rules.topic_pattern_problem if topics else acl_rules.pattern_problem
    problems = [f"pattern {i + 1}: {problem}" for i, p in enumerate(found) if (problem := rule(p)) is not None]
    return sorted(set(found)), problems


def _admin_error(exc: HTTPException) -> str:
    return str(exc.detail)


@router.post("/apps")
async def app_create(request: Request) -> Response:
    """An admin creates an app; its secret is shown on the answer page only, once."""
    sess = _signed_in(request)
    form = await _form(request, sess, "admin")
    app_id = form.get("app_id", "").strip()
    problems = []
    if (problem := acl_rules.name_problem(app_id)) is not None:
        problems.append(f"app id: {problem}")
    acl: dict[str, list[str]] = {}
    for op in acl_rules.OPERATIONS:
        acl[op], bad = _patterns(form.get(op, ""), topics=op != "group")
        problems += [f"{op} {b}" for b in bad]
    if problems:
        return _apps_page(request, sess, status_code=422, error="; ".join(problems))
    try:
        with db.write(_svc(request).engine) as conn:
            created = routes_admin.insert_app(conn, f"console:{sess.username}", app_id,
                                              form.get("description", "").strip()[:2000],
                                              form.get("default_cluster") or None, acl,
                                              sealer=_svc(request).sealer)
    except HTTPException as exc:
        return _apps_page(request, sess, status_code=exc.status_code, error=_admin_error(exc))
    routes_admin.issue_principals(_svc(request), app_id)
    return _apps_page(request, sess, status_code=201, secret={"app_id": app_id, "secret": created["secret"],
                                                              "generation": created["key_generation"]})


def _app(svc: Any, app_id: str) -> dict[str, Any] | None:
    with db.read(svc.engine) as conn:
        row = conn.execute(select(apps).where(apps.c.app_id == app_id)).mappings().first()
    return routes_admin.app_json(row) if row is not None else None


def _app_page(request: Request, sess: users.Session, app_id: str, status_code: int = 200, **ctx: Any) -> Response:
    svc = _svc(request)
    app = _app(svc, app_id)
    if app is None:
        return _page(request, "error.html", sess, status_code=404, message="No such app.")
    ctx.setdefault("error", None)
    with db.read(svc.engine) as conn:
        history = audit.query(conn, target=f"app:{app_id}", limit=30)
        app_requests = provision.listing(conn, app_id)
        broker_access = kafka_view.app_view(conn, app)["clusters"]
    resp = _page(request, "app.html", sess, status_code=status_code, app=app, acl=app["acl"] or {},
                 ops=acl_rules.OPERATIONS, can_admin=sess.can("admin"), history=history, app_requests=app_requests,
                 can_request=sess.can("operator"), broker_access=broker_access, **ctx)
    resp.headers["Cache-Control"] = "no-store"
    return resp


@router.get("/apps/{app_id}")
def app_page(request: Request, app_id: str) -> Response:
    sess = _signed_in(request)
    return _app_page(request, sess, app_id)


@router.post("/apps/{app_id}/rotate")
async def app_rotate(request: Request, app_id: str) -> Response:
    """A new secret, shown once on the answer; the old one stops signing at once."""
    sess = _signed_in(request)
    await _form(request, sess, "admin")
    try:
        with db.write(_svc(request).engine) as conn:
            rotated = routes_admin.new_secret(conn, f"console:{sess.username}", app_id, sealer=_svc(request).sealer)
    except HTTPException as exc:
        return _page(request, "error.html", sess, status_code=exc.status_code, message=_admin_error(exc))
    _svc(request).reconciler.kick()  # its pass retires the old config-center key (domain/configkeys.py)
    return _app_page(request, sess, app_id, secret={"app_id": app_id, "secret": rotated["secret"],
                                                    "generation": rotated["key_generation"]})


@router.post("/apps/{app_id}/acl")
async def app_acl(request: Request, app_id: str) -> Response:
    """Add or remove one ACL pattern (``action`` add | remove, ``op`` produce | consume | group)."""
    sess = _signed_in(request)
    form = await _form(request, sess, "admin")
    op, action, pattern = form.get("op", ""), form.get("action", ""), form.get("pattern", "").strip()
    if op not in _OPS or action not in ("add", "remove"):
        return _app_page(request, sess, app_id, status_code=422, error="op: produce, consume or group; "
                                                                        "action: add or remove")
    rule = acl_rules.pattern_problem if op == "group" else acl_rules.topic_pattern_problem
    if action == "add" and (problem := rule(pattern)) is not None:
        return _app_page(request, sess, app_id, status_code=422, error=f"pattern: {problem}")
    svc = _svc(request)
    try:
        with db.write(svc.engine) as conn:
            row = conn.execute(select(apps.c.acl).where(apps.c.app_id == app_id)).first()
            if row is None:
                raise HTTPException(status_code=404, detail="app not found")
            acl: dict[str, list[str]] = {o: list((row[0] or {}).get(o) or []) for o in acl_rules.OPERATIONS}
            if action == "add":
                acl[op] = sorted(set(acl[op]) | {pattern})
            else:
                acl[op] = [p for p in acl[op] if p != pattern]
            routes_admin.replace_acl(conn, f"console:{sess.username}", app_id, acl)
    except HTTPException as exc:
        return _page(request, "error.html", sess, status_code=exc.status_code, message=_admin_error(exc))
    routes_admin.issue_principals(svc, app_id)  # the brokers' bindings follow at the pass this kicks
    return RedirectResponse(f"/console/apps/{quote(app_id, safe='')}", status_code=303)


@router.get("/clusters")
def cluster_list(request: Request) -> Response:
    sess = _signed_in(request)
    svc = _svc(request)
    with db.read(svc.engine) as conn:
        clusters = list(registry.all_clusters(conn).values())
    for c in clusters:
        c["writes_to"] = writes_to(svc, c["name"]) if c.get("standby") else "primary"
    return _page(request, "clusters.html", sess, clusters=clusters, can_switch=sess.can("admin"))


@router.post("/clusters/failover")
async def cluster_failover(request: Request) -> Response:
    """Move a cluster's writes to its standby, back to the primary (failback sync), or clear the switch."""
    return await off_loop(request, "admin", _failover, "to", "cluster")


def _failover(request: Request, sess: users.Session, form: dict[str, str]) -> Response:
    to, cluster = form["to"], form["cluster"]
    try:
        if to not in ("standby", "primary", "clear"):
            raise ConfigRejected({"to": "standby, primary or clear"})
        scope = f"cluster:{cluster}"
        plan = (hotconfig.validate(scope, {}, ["route.active"], None) if to == "clear"
                else hotconfig.validate(scope, {"route.active": to}, [], None))
        configwrites.push(_svc(request), plan, f"console:{sess.username}", f"failover: writes to {to}",
                          guard=False, action="cluster.failover", extra={"to": to})
    except ConfigRejected as exc:
        return _page(request, "error.html", sess, status_code=422, message="; ".join(exc.errors.values()))
    return RedirectResponse("/console/clusters", status_code=303)


@router.get("/users")
def user_list(request: Request) -> Response:
    sess = _signed_in(request)
    if not sess.can("admin"):
        raise Denied()
    return _page(request, "users.html", sess, rows=users.list_users(_svc(request).engine), error=None)


@router.post("/users/enabled")
async def user_enabled(request: Request) -> Response:
    """An admin disables a user (e.g. a single sign-on user whose access must end now) or enables it again."""
    sess = _signed_in(request)
    form = required(await _form(request, sess, "admin"), "username", "enabled")
    svc = _svc(request)
    username, enabled = form["username"], form["enabled"] == "1"
    error = "you cannot disable yourself" if username == sess.username and not enabled else None
    if error is None and not users.set_enabled(svc.engine, username, enabled):
        error = "no such user"
    if error:
        return _page(request, "users.html", sess, status_code=422, rows=users.list_users(svc.engine), error=error)
    _audit(svc, sess, "user.enable" if enabled else "user.disable", username, None, {"enabled": enabled})
    return RedirectResponse("/console/users", status_code=303)


@router.post("/users")
async def user_create(request: Request) -> Response:
    """An admin adds a console user (or resets one's password and role)."""
    sess = _signed_in(request)
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
