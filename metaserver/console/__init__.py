"""The ykafka console: the management platform's web face, served by the MetaServer under ``/console``.

``install(app)`` adds the pages, the vendored static files and the users admin API. All state (users,
sessions, lockouts) is in the MetaServer's database, so any peer behind one address serves any request.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from . import (
    admin_views,
    api,
    browse_views,
    config_views,
    dlq_views,
    group_views,
    notify_views,
    overview_views,
    request_views,
    reset_views,
    sso_views,
    topic_views,
    trace_views,
    views,
)


def install(app: FastAPI) -> None:
    # the page modules register on the console router (metaserver/rollouts/console_views.py too: app.py imports it)
    assert (admin_views.router is
            browse_views.router is dlq_views.router is group_views.router is notify_views.router is request_views.router
            is reset_views.router is sso_views.router
            is topic_views.router is trace_views.router is config_views.router is overview_views.router
            is views.router)
    app.include_router(views.router)
    app.include_router(api.router)
    app.mount("/console/static", StaticFiles(directory=str(views.HERE / "static")), name="console-static")

    @app.get("/favicon.ico", include_in_schema=False)
    def _favicon() -> FileResponse:  # browsers ask for it whatever the page's <link rel=icon> says
        return FileResponse(views.HERE / "static" / "favicon.svg", media_type="image/svg+xml")

    @app.get("/console", include_in_schema=False)
    def _root() -> RedirectResponse:
        return RedirectResponse("/console/", status_code=307)

    @app.exception_handler(views.Denied)
    async def _denied(request: Request, _exc: views.Denied) -> HTMLResponse:
        return views.templates.TemplateResponse(request, "error.html", {"session": None, "nav": "",
                                                "message": "Forbidden: your role may not do this, or the "
                                                "form's CSRF token is missing or stale."}, status_code=403)

    @app.exception_handler(views.LoginRequired)
    async def _login_required(request: Request, _exc: views.LoginRequired) -> RedirectResponse:
        return views._login_redirect()

    @app.exception_handler(views.FormIncomplete)
    async def _incomplete(request: Request, exc: views.FormIncomplete) -> HTMLResponse:
        return views.templates.TemplateResponse(request, "error.html", {"session": None, "nav": "",
                                                "message": f"Bad request: {exc}."}, status_code=400)
