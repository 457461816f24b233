"""The console's Notifications page: alert channels, routes and silences (everyone reads, secrets masked;
admins edit the section as YAML and add silences with an expiry; each edit checked as the pipeline checks its
file and audited)."""

from __future__ import annotations

from collections.abc import Mapping

import yaml
from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from ..domain import notifications
from . import doc_pages, users
from .views import _form, _page, _signed_in, _svc, router

MATCH_FIELDS = ("level", "rule", "app", "topic", "group", "cluster")


def _notify_page(request: Request, sess: users.Session, status_code: int = 200, body: str | None = None,
                 error: Exception | None = None) -> Response:
    found = notifications.in_force(_svc(request).engine)
    return _page(request, "notifications.html", sess, status_code=status_code, found=found, cfg=found.masked(),
                 silences=notifications.silences(found.config), body=None if body is None else _resubmitted(body),
                 error=str(error) if error else None, can_edit=sess.can("admin"),
                 saved=request.query_params.get("saved"), match_fields=MATCH_FIELDS)


def _resubmitted(body: str) -> str | None:
    """A refused edit's text shown again with its secrets masked, so the admin can fix it; None when it is not
    YAML (the form then shows the section in force: nothing typed is echoed unmasked)."""
    try:
        data = yaml.safe_load(body)
    except yaml.YAMLError:
        return None
    return notifications.dump(notifications.mask(data)) if isinstance(data, Mapping) else None


@router.get("/notifications")
def notifications_page(request: Request) -> Response:
    return doc_pages.show(request, _notify_page)


@router.post("/notifications")
async def notifications_save(request: Request) -> Response:
    return await doc_pages.save(request, notifications.save, notifications.NotifyInvalid, _notify_page,
                                "/console/notifications")


@router.post("/notifications/silence")
async def notifications_silence(request: Request) -> Response:
    sess = _signed_in(request)
    form = await _form(request, sess, "admin")
    match = {k: [p.strip() for p in form.get(k, "").split(",") if p.strip()][:20] for k in MATCH_FIELDS}
    try:
        hours = float(form.get("hours", ""))
    except ValueError:
        hours = 0.0
    try:
        await run_in_threadpool(notifications.add_silence, _svc(request).engine, {k: v for k, v in match.items() if v},
                                hours, form.get("comment", ""), f"console:{sess.username}")
    except notifications.NotifyInvalid as exc:
        return _notify_page(request, sess, status_code=422, error=exc)
    return RedirectResponse("/console/notifications?saved=1", status_code=303)
