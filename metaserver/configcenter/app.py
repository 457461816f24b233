"""FastAPI factory of the Apollo-compatible config service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from metaserver.configcenter import configservice, openapi
from metaserver.configcenter.center import ConfigCenter
from metaserver.configcenter.errors import install_error_handlers


def create_app(db_path: str, longpoll_timeout: float = 60.0, openapi_token: str | None = None) -> FastAPI:
    """The config service over the SQLite database at `db_path`.

    `longpoll_timeout` is how long `/notifications/v2` holds a poll before answering 304;
    `openapi_token`, when given, is seeded (idempotently) as an Open API token allowed on every app.
    """
    center = ConfigCenter(db_path, longpoll_timeout)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await center.start(openapi_token)
        try:
            yield
        finally:
            await center.stop()

    app = FastAPI(title="ykafka config center (Apollo-compatible)", lifespan=lifespan, docs_url=None,
                  redoc_url=None)
    app.state.center = center
    install_error_handlers(app)
    app.add_middleware(configservice.AccessKeyMiddleware)
    app.include_router(configservice.router)
    app.include_router(openapi.router)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/stats")
    async def stats() -> dict[str, int]:
        """Operational counters (parked long polls, known namespaces); used by the benchmark."""
        return {"longPolls": len(center.registry), "namespaces": len(center.model.namespaces)}

    return app
