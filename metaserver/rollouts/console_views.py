"""Console pages of guarded rollouts: the guard rules (everyone reads; admins edit, audited) and rollout plans
(everyone reads the decisions and their evidence; operators start, pause, resume, abort and force)."""

from __future__ import annotations

import time
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from ykafka.catalog import GLOBAL, Scope, ScopeKind

from ..console import doc_pages, users
from ..console.config_views import _parse_changes
from ..console.views import _form, _page, _session, _signed_in, _svc, router
from ..domain import clients, hotconfig
from ..domain.hotconfig import ConfigRejected
from ..storage import db
from . import guards, judge, markers, plans, targets


def _guards_page(request: Request, sess: users.Session, status_code: int = 200, body: str | None = None,
                 error: guards.GuardRulesInvalid | None = None) -> Response:
    found = guards.in_force(_svc(request).engine)
    return _page(request, "guards.html", sess, status_code=status_code, found=found,
                 body=found.body if body is None else body, errors=error.errors if error else None,
                 can_edit=sess.can("admin"), saved=request.query_params.get("saved"))


@router.get("/guards")
def guard_rules(request: Request) -> Response:
    return doc_pages.show(request, _guards_page)


@router.post("/guards")
async def guard_rules_save(request: Request) -> Response:
    return await doc_pages.save(request, guards.save, guards.GuardRulesInvalid, _guards_page, "/console/guards")


# --- rollout plans -------------------------------------------------------------------------------------

def _rollouts_page(request: Request, sess: users.Session, scope: str, status_code: int = 200,
                   form: dict[str, str] | None = None, errors: dict[str, str] | None = None) -> Response:
    svc = _svc(request)
    try:
        namespace = hotconfig.parse_scope(scope).namespace() if scope else None
    except ConfigRejected:
        namespace, scope = None, ""
    return _page(request, "rollouts.html", sess, status_code=status_code, scope=scope,
                 plans=plans.listing(svc, namespace, limit=20), can_edit=sess.can("operator"),
                 form=form or {}, errors=errors or {}, error=bool(errors))


@router.get("/rollouts")
def rollouts(request: Request) -> Response:
    sess = _signed_in(request)
    return _rollouts_page(request, sess, request.query_params.get("scope", "").strip()[:300])


@router.post("/rollouts")
async def rollout_start(request: Request) -> Response:
    sess = _signed_in(request)
    form = await _form(request, sess, "operator")
    scope = form.get("scope", "").strip()[:300]
    try:
        sets, deletes = _parse_changes(form.get("changes", ""))
        steps = [float(x) for x in form.get("steps", "").replace(" ", "").split(",") if x]
        apps = [x for x in form.get("apps", "").replace(",", " ").split() if x]
        spec = plans.PlanSpec(scope=scope, set=dict(sets), delete=deletes, steps=steps,
                              bake_s=float(form.get("bake") or 300),
                              thresholds=judge.Thresholds(p99_floor_ms=float(form.get("p99_floor") or 50)),
                              targets=targets.Targets(apps=apps) if apps else None)
        await run_in_threadpool(plans.create, _svc(request), spec, f"console:{sess.username}")
    except ConfigRejected as exc:
        return _rollouts_page(request, sess, scope, status_code=422, form=form, errors=exc.errors)
    except (ValueError, ValidationError) as exc:
        return _rollouts_page(request, sess, scope, status_code=422, form=form,
                              errors={"plan": _plain(exc)})
    return RedirectResponse(f"/console/rollouts?scope={quote(scope)}", status_code=303)


def _plain(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_input=False))
    return "steps and bake must be numbers"


@router.post("/rollouts/{plan_id}/action")
async def rollout_action(request: Request, plan_id: int) -> Response:
    sess = _signed_in(request)
    form = await _form(request, sess, "operator")
    scope = form.get("scope", "").strip()[:300]
    action = form.get("action", "")
    if action not in ("pause", "resume", "abort", "force"):
        return _rollouts_page(request, sess, scope, status_code=422, errors={"action": "unknown action"})
    try:
        await run_in_threadpool(plans.control, _svc(request), plan_id, action, f"console:{sess.username}")
    except LookupError:
        return _rollouts_page(request, sess, scope, status_code=404, errors={"plan": "no such plan"})
    except ConfigRejected as exc:
        return _rollouts_page(request, sess, scope, status_code=409, errors=exc.errors)
    return RedirectResponse(f"/console/rollouts?scope={quote(scope)}", status_code=303)


# --- release markers -----------------------------------------------------------------------------------

@router.get("/data/markers")
def release_markers(request: Request) -> Response:
    """Markers for a page's charts: ``?topic=`` (the topic's, its cluster's and the global namespace's),
    ``?group=`` (the group's and global), ``?app=&client=`` (every namespace reaching that client: see
    :func:`markers.client_namespaces`), none (everything); ``since`` in seconds (default one hour)."""
    sess = _session(request)
    if sess is None:
        return JSONResponse({"detail": "log in"}, status_code=401)
    q = request.query_params
    try:
        since_s = min(max(float(q.get("since", "3600")), 60.0), 30 * 86400.0)
    except ValueError:
        return JSONResponse({"detail": "since: seconds"}, status_code=400)
    namespaces: list[str] | None = None
    try:
        if q.get("topic"):
            namespaces = [Scope(ScopeKind.TOPIC, q["topic"][:255]).namespace(), GLOBAL.namespace()]
            namespaces += [Scope(ScopeKind.CLUSTER, c[:200]).namespace() for c in q.getlist("cluster")[:1]]
        elif q.get("group"):
            namespaces = [Scope(ScopeKind.GROUP, q["group"][:255]).namespace(), GLOBAL.namespace()]
    except ValueError:
        return JSONResponse({"detail": "not a topic or group name"}, status_code=400)
    svc = _svc(request)
    client = None
    with db.read(svc.engine) as conn:
        if q.get("client"):
            client = clients.one(conn, svc.settings.renew_interval, q.get("app", "")[:255], q["client"][:255])
            if client is None:
                return JSONResponse({"detail": "no such client"}, status_code=404)
            namespaces = markers.client_namespaces(client)
        found = markers.markers(conn, time.time() - since_s, namespaces, reaching=client)
    return JSONResponse({"markers": found})
