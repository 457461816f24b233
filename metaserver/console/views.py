"""The console's pages: server-rendered (Jinja2, autoescaped), one small script for the live panels.

Every page needs a session cookie; every POST carries the session's CSRF token; roles gate actions
(viewer reads, operator changes config, admin manages users). Every action lands in the audit log.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape
from starlette.concurrency import run_in_threadpool

from ..domain import audit
from ..domain.apollo import ApolloOpenApi
from ..domain.hotconfig import ConfigRejected
from ..services import Services
from ..storage import db
from . import sso, titles, users

COOKIE = "ykafka_console"
HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
_DICT_ATTRIBUTES = frozenset(dir(dict))
_jinja_getattr = templates.env.getattr


def _getattr(obj: Any, attribute: str) -> Any:
    """``row.name`` in a template, as Jinja resolves it, without first raising AttributeError for every field
    of a plain dict (most rows are dicts: on a page of hundreds of rows that failed lookup was the cost)."""
    if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
        try:
            return obj[attribute]
        except KeyError:
            return templates.env.undefined(obj=obj, name=attribute)
    return _jinja_getattr(obj, attribute)


templates.env.getattr = _getattr  # type: ignore[method-assign]
router = APIRouter(prefix="/console", include_in_schema=False)
log = structlog.get_logger("metaserver.console")


class Denied(Exception):
    """403: wrong role or missing / wrong CSRF token."""


class LoginRequired(Exception):
    """No signed-in session: answered by a redirect to the login page (:func:`_signed_in`)."""


class FormIncomplete(Exception):
    """400: a POSTed form lacks fields its page always sends (a hand-made or truncated request)."""

    def __init__(self, missing: list[str]) -> None:
        super().__init__(f"missing form field(s): {', '.join(missing)}")


def required(form: dict[str, str], *names: str) -> dict[str, str]:
    """``form`` when it holds every one of ``names`` (FormIncomplete → 400 naming the missing ones, never a value)."""
    missing = [name for name in names if name not in form]
    if missing:
        raise FormIncomplete(missing)
    return form


def _svc(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


def _source(request: Request) -> str:
    return request.client.host if request.client else "?"


def _page(request: Request, name: str, sess: users.Session | None, status_code: int = 200,
          **ctx: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, {"session": sess, "nav": name.split(".")[0],
                                                      "page_title": titles.page_title(name, ctx), **ctx},
                                      status_code=status_code)


def _query(request: Request, names: Iterable[str], limit: int = 200) -> dict[str, str]:
    """The named query parameters, stripped and cut to ``limit`` characters ('' when absent)."""
    return {k: request.query_params.get(k, "").strip()[:limit] for k in names}


def _session(request: Request) -> users.Session | None:
    return users.session(_svc(request).engine, request.cookies.get(COOKIE))


def _signed_in(request: Request) -> users.Session:
    """The request's session; without one, :class:`LoginRequired` (a 303 to the login page)."""
    sess = _session(request)
    if sess is None:
        raise LoginRequired()
    return sess


async def _form(request: Request, sess: users.Session, role: str) -> dict[str, str]:
    """The POSTed form after the CSRF and role checks (Denied → 403)."""
    form = await request.form()
    values = {k: v for k, v in form.items() if isinstance(v, str)}
    if values.get("csrf") != sess.csrf or not sess.can(role):
        raise Denied()
    return values


def _login_redirect() -> RedirectResponse:
    return RedirectResponse("/console/login", status_code=303)


def _audit(svc: Services, sess: users.Session, action: str, target: str, before: Any, after: Any) -> None:
    with db.write(svc.engine) as conn:
        audit.record(conn, f"console:{sess.username}", action, target, before, after)


# --- login ---------------------------------------------------------------------------------------

def _login_page(request: Request, status_code: int = 200, error: str | None = None) -> HTMLResponse:
    return _page(request, "login.html", None, status_code=status_code, error=error,
                 sso=sso.enabled(_svc(request).settings))


@router.get("/login")
def login_form(request: Request) -> Response:
    return _login_page(request)


@router.post("/login")
async def login(request: Request) -> Response:
    form = await request.form()
    username, password = str(form.get("username") or ""), str(form.get("password") or "")
    svc = _svc(request)
    try:
        got = await run_in_threadpool(users.login, svc.engine, username, password, _source(request))
    except users.UserError:
        return _login_page(request, 429, "Too many failed logins for this user from this address; try again later.")
    if got is None:
        return _login_page(request, 401, "Wrong username or password.")
    token, sess = got
    _audit(svc, sess, "console.login", sess.username, None, {"source": _source(request)})
    resp = RedirectResponse("/console/", status_code=303)
    resp.set_cookie(COOKIE, token, max_age=users.SESSION_TTL_S, httponly=True, samesite="strict",
                    secure=request.url.scheme == "https", path="/console")
    return resp


@router.post("/logout")
async def logout(request: Request) -> Response:
    sess = _signed_in(request)
    await _form(request, sess, "viewer")
    users.logout(_svc(request).engine, request.cookies.get(COOKIE, ""))
    resp = _login_redirect()
    resp.delete_cookie(COOKIE, path="/console")
    return resp


def _api(svc: Services) -> ApolloOpenApi:
    if svc.apollo is None:
        raise ConfigRejected({"config center": "no config center configured"}, "no config center")
    return svc.apollo


def fmt_time(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


templates.env.filters["time"] = fmt_time


def code_spans(text: Any) -> Markup:
    """A message escaped as text, with its `backticked` commands shown as code (the escaping comes first, so a
    value holding markup still shows as text)."""
    return Markup(re.sub(r"`([^`<>]+)`", r"<code>\1</code>", str(escape(str(text)))))


templates.env.filters["code_spans"] = code_spans
