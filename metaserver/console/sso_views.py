"""The console's single sign-on routes: ``/console/sso/login`` sends the browser to the identity provider,
``/console/sso/callback`` finishes the login there (metaserver/console/sso.py checks it) and opens a console
session. Local users keep logging in at ``/console/login`` (break-glass when the provider is down)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from . import sso, users
from .views import COOKIE, _audit, _page, _source, _svc, router


def _client(request: Request) -> sso.OidcClient | None:
    """The app's OIDC client (metaserver/app.py builds it at start from the settings); None: SSO is off."""
    client: sso.OidcClient | None = request.app.state.oidc_client
    return client


def _refused(request: Request, message: str, status: int) -> Response:
    return _page(request, "error.html", None, status_code=status, message=f"Single sign-on failed: {message}.",
                 retry="/console/login")


@router.get("/sso/login")
async def sso_login(request: Request) -> Response:
    client = _client(request)
    if client is None:
        return _refused(request, "it is not configured on this MetaServer; log in with a console user", 404)
    try:
        url, started = await run_in_threadpool(client.start)
    except sso.SsoError as exc:
        return _refused(request, str(exc), exc.status)
    resp = RedirectResponse(url, status_code=303)
    # SameSite=Lax: the provider's redirect back is a top-level cross-site GET, which Lax cookies go along with
    resp.set_cookie(sso.COOKIE, started, max_age=sso.LOGIN_TTL_S, httponly=True, samesite="lax",
                    secure=request.url.scheme == "https", path=sso.COOKIE_PATH)
    return resp


@router.get("/sso/callback")
async def sso_callback(request: Request) -> Response:
    client = _client(request)
    if client is None:
        return _refused(request, "it is not configured on this MetaServer; log in with a console user", 404)
    params = {k: v for k, v in request.query_params.items() if k in ("code", "state", "error", "iss")}
    svc = _svc(request)
    try:
        identity = await run_in_threadpool(client.finish, params, request.cookies.get(sso.COOKIE))
        token, sess = await run_in_threadpool(users.sso_login, svc.engine, identity.username, identity.role)
    except sso.SsoError as exc:
        resp = _refused(request, str(exc), exc.status)
        if not exc.keep_login:
            resp.delete_cookie(sso.COOKIE, path=sso.COOKIE_PATH)
        return resp
    except users.UserError:
        resp = _refused(request, "this account is disabled in the console; ask an administrator", 403)
        resp.delete_cookie(sso.COOKIE, path=sso.COOKIE_PATH)
        return resp
    _audit(svc, sess, "console.login", sess.username, None,
           {"source": _source(request), "via": "sso", "subject": identity.subject, "role": identity.role,
            "claim_from": identity.claim_source})
    resp = _page(request, "sso_done.html", sess)
    resp.delete_cookie(sso.COOKIE, path=sso.COOKIE_PATH)
    resp.set_cookie(COOKIE, token, max_age=users.SESSION_TTL_S, httponly=True, samesite="strict",
                    secure=request.url.scheme == "https", path="/console")
    return resp
