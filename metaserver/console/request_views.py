"""The Requests page: app owners' topic and consumer-group requests and the admin's decision on each
(``metaserver.console.provision`` does the work), with the clusters' loads and the least loaded suggested."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from ..storage import db
from . import provision, users
from .admin_views import _app_page
from .views import _form, _page, _signed_in, _svc, router


@router.post("/apps/{app_id}/requests")
async def request_submit(request: Request, app_id: str) -> Response:
    """An app owner (operator) asks for a topic or a consumer group for the app."""
    sess = _signed_in(request)
    form = await _form(request, sess, "operator")
    try:
        provision.submit(_svc(request).engine, f"console:{sess.username}", app_id, form)
    except provision.RequestError as exc:
        return _app_page(request, sess, app_id, status_code=422, error=str(exc))
    return RedirectResponse(f"/console/apps/{quote(app_id, safe='')}", status_code=303)


def _requests_page(request: Request, sess: users.Session, status_code: int = 200, error: str | None = None
                   ) -> Response:
    svc = _svc(request)
    with db.read(svc.engine) as conn:
        rows = provision.listing(conn)
        loads = provision.cluster_loads(conn, svc.settings.renew_interval)
    return _page(request, "requests.html", sess, status_code=status_code, rows=rows, loads=loads,
                 suggested=loads[0]["name"] if loads else None, can_decide=sess.can("admin"), error=error)


@router.get("/requests")
def request_list(request: Request) -> Response:
    sess = _signed_in(request)
    return _requests_page(request, sess)


@router.post("/requests/{req_id}/approve")
async def request_approve(request: Request, req_id: int) -> Response:
    """Approve onto the chosen cluster: create the topic there, grant the ACL, set the route."""
    sess = _signed_in(request)
    form = await _form(request, sess, "admin")
    try:
        await run_in_threadpool(provision.approve, _svc(request), req_id, form.get("cluster", ""),
                                f"console:{sess.username}")
    except (provision.RequestError, LookupError) as exc:
        return _requests_page(request, sess, status_code=422, error=str(exc))
    return RedirectResponse("/console/requests", status_code=303)


@router.post("/requests/{req_id}/reject")
async def request_reject(request: Request, req_id: int) -> Response:
    sess = _signed_in(request)
    form = await _form(request, sess, "admin")
    try:
        provision.reject(_svc(request).engine, req_id, f"console:{sess.username}", form.get("reason", "").strip())
    except provision.RequestError as exc:
        return _requests_page(request, sess, status_code=422, error=str(exc))
    return RedirectResponse("/console/requests", status_code=303)
