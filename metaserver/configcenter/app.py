"""FastAPI factory of the Apollo-compatible config service."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from ..routes.httpguard import BodyLimit, SingleValuedQuery
from . import configservice, openapi
from .center import RELEASE_SCAN_S, ConfigCenter
from .errors import error_body, install_error_handlers
from .longpoll import DEFAULT_POLL_RETRY_AFTER_S


def _apollo_error(status: int, message: str) -> dict[str, Any]:
    kind = "org.springframework.web.HttpMediaTypeException" if status == 413 else \
        "com.ctrip.framework.apollo.common.exception.BadRequestException"
    return error_body(status, message, kind)


class OpenApiTrailingSlash:
    """Serve ``/openapi/...`` with a trailing slash as without it, as Apollo (Spring) does; Starlette would
    answer 307, which HTTP clients such as httpx do not follow for a POST."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path.startswith("/openapi/") and len(path) > 1 and path.endswith("/"):
            trimmed = path.rstrip("/")
            raw = scope.get("raw_path")
            scope = {**scope, "path": trimmed, "raw_path": raw.rstrip(b"/") if raw else raw}
        await self.app(scope, receive, send)


#: FastAPI >= 0.165 asks OpenTelemetry for its global providers on every request (an ``os.environ`` lookup
#: each): ~12 % of a ``/configs`` answer's CPU on a config service that exports no telemetry, and a failover
#: moves every client's fetch and poll onto one survivor (docs/benchmarks.md, bench/controlplane_failover.py)
NO_TELEMETRY: dict[str, Any] = ({"telemetry": {"tracing": False, "metrics": False, "logs": False}}
                                if "telemetry" in inspect.signature(FastAPI).parameters else {})


def create_app(db_path: str, longpoll_timeout: float = 60.0, openapi_token: str | None = None,
               advertise_url: str | None = None, scan_interval: float = RELEASE_SCAN_S,
               notify: bool = True, max_parked: int = 0,
               poll_retry_after: int = DEFAULT_POLL_RETRY_AFTER_S, require_access_key: bool = False) -> FastAPI:
    """The config service over the database `db_path` (a SQLite file or a SQLAlchemy URL).

    `longpoll_timeout` is how long `/notifications/v2` holds a poll before answering 304;
    `openapi_token`, when given, is seeded (idempotently) as an Open API token allowed on every app;
    `max_parked` caps the parked long polls (0: derived from the open-file limit, `default_max_parked`);
    `poll_retry_after` is the ``Retry-After`` (seconds) of a poll refused at the cap;
    `require_access_key`: every `/configs`, `/configfiles`, `/notifications` read must be signed (401 unsigned),
    also for an app without access keys (the secured stack: the MetaServer's per-app keys, issue 37).
    """
    center = ConfigCenter(db_path, longpoll_timeout, advertise_url,  # advertise_url: listed by /services/*
                          scan_interval=scan_interval, notify=notify, max_parked=max_parked,
                          poll_retry_after=poll_retry_after)
    center.require_access_key = require_access_key

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await center.start(openapi_token)
        try:
            yield
        finally:
            await center.stop()

    app = FastAPI(title="ykafka config center (Apollo-compatible)", lifespan=lifespan, docs_url=None,
                  redoc_url=None, **NO_TELEMETRY)
    app.state.center = center
    install_error_handlers(app)
    app.add_middleware(configservice.HotPaths)  # innermost: the guards below run first
    app.add_middleware(configservice.AccessKeyMiddleware)
    app.add_middleware(SingleValuedQuery, error_body=_apollo_error)  # the access-key check reads what the handler reads
    app.add_middleware(BodyLimit, error_body=_apollo_error)
    app.add_middleware(OpenApiTrailingSlash)
    app.include_router(configservice.router)
    app.include_router(openapi.router)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/stats")
    async def stats() -> dict[str, int]:
        """Operational counters (parked long polls, the cap and the polls refused at it, known namespaces);
        used by the benchmark and by operators watching an instance fill up."""
        return {"longPolls": len(center.registry), "maxLongPolls": center.max_parked,
                "longPollsRefused": center.refused,
                "pollRetryAfter": center.poll_retry_after, "namespaces": len(center.model.namespaces),
                "releaseScans": center.scans, "notifiesReceived": center.notifies_received}

    return app
