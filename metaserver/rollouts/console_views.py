"""Console pages of guarded rollouts: the guard rules (everyone reads; admins edit, audited)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from ..console import users
from ..console.views import _form, _login_redirect, _page, _session, _svc, router
from . import guards


def _guards_page(request: Request, sess: users.Session, status_code: int = 200, body: str | None = None,
                 errors: dict[str, str] | None = None) -> Response:
    found = guards.in_force(_svc(request).engine)
    return _page(request, "guards.html", sess, status_code=status_code, found=found,
                 body=found.body if body is None else body, errors=errors, can_edit=sess.can("admin"),
                 saved=request.query_params.get("saved"))


@router.get("/guards")
def guard_rules(request: Request) -> Response:
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    return _guards_page(request, sess)


@router.post("/guards")
async def guard_rules_save(request: Request) -> Response:
    sess = _session(request)
    if sess is None:
        return _login_redirect()
    form = await _form(request, sess, "admin")
    body = form.get("body", "")[:200_000]
    try:
        await run_in_threadpool(guards.save, _svc(request).engine, body, f"console:{sess.username}")
    except guards.GuardRulesInvalid as exc:
        return _guards_page(request, sess, status_code=422, body=body, errors=exc.errors)
    return RedirectResponse("/console/guards?saved=1", status_code=303)
