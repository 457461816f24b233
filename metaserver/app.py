"""The MetaServer FastAPI application: ``create_app(settings)``.

Start-up migrates the database to head (peers take turns), loads the shared token key and builds the
config-center clients. Errors map onto plain JSON answers: 401 ``authentication failed`` for any
authentication failure, 429 with ``Retry-After`` when rate-limited, 422 with field errors / per-key
reasons for bad input, 502 when the config center fails.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from .console import install as install_console
from .console.sso import OidcClient
from .console.sso import enabled as sso_enabled
from .console.warm import SummaryWarmer
from .domain import clients, sealing
from .domain.apollo import ApolloError, ApolloOpenApi
from .domain.auth import AuthFailed, RateLimited
from .domain.authswitch import AuthSwitch
from .domain.configwrites import ConfigBusy
from .domain.hotconfig import ConfigRejected
from .domain.reach import RouteBook
from .domain.tokens import TokenCodec, load_or_create_key
from .kafka.reconciler import Reconciler
from .rollouts import console_views as _rollout_pages  # noqa: F401 - registers its pages on the console router
from .rollouts import guards
from .rollouts import routes as rollout_routes
from .rollouts.driver import Driver as RolloutDriver
from .routes import (
    admin as routes_admin,
)
from .routes import (
    config as routes_config,
)
from .routes import (
    messages as routes_messages,
)
from .routes import (
    notify as routes_notify,
)
from .routes import (
    observe as routes_observe,
)
from .routes import (
    offsets as routes_offsets,
)
from .routes import (
    placements as routes_placements,
)
from .routes import (
    sdk as routes_sdk,
)
from .routes import (
    topics as routes_topics,
)
from .routes.httpguard import ERROR_RESPONSES, BodyLimit, SingleValuedQuery, validation_errors
from .services import Services
from .settings import Settings
from .storage import db

log = structlog.get_logger("metaserver")


def build_services(settings: Settings) -> Services:
    engine = db.make_engine(settings.db_url)
    db.migrate(engine)
    apollo = None
    if settings.openapi_url:
        apollo = ApolloOpenApi(settings.openapi_url, settings.configcenter_openapi_token, env=settings.apollo_env,
                               app_id=settings.apollo_app_id, cluster=settings.apollo_cluster,
                               operator=settings.apollo_operator)
    key = load_or_create_key(engine)
    sealer = sealing.load(settings, key)  # the key outside the database (or the old derivation, warned)
    sealing.reseal(engine, sealer, key)
    svc = Services(
        settings=settings,
        engine=engine,
        tokens=TokenCodec(sealer.token_key),
        auth_switch=AuthSwitch(engine, ttl_s=settings.auth_switch_ttl_s),
        apollo=apollo,
        routes=RouteBook(apollo, max_age_s=settings.route_cache_s),
        issuer=hashlib.sha256(b"ykafka-issuer:" + key).hexdigest()[:16],
        box=sealer.box,
        sealer=sealer,
    )
    svc.reconciler = Reconciler(svc, settings.acl_reconcile_s)
    return svc


async def _prune_clients(svc: Services) -> None:
    """The client inventory's retention, every ``client_prune_s`` (the first a minute after start): each
    MetaServer runs it, the deletes are idempotent and batched (domain/clients.prune)."""
    settings = svc.settings
    delay = min(60.0, settings.client_prune_s)
    while True:
        await asyncio.sleep(delay)
        delay = settings.client_prune_s
        try:
            removed = await run_in_threadpool(clients.prune, svc.engine, time.time(),
                                              settings.client_retention_days * 86400,
                                              settings.client_history_days * 86400)
            if any(removed.values()):
                log.info("clients.pruned", **removed)
        except Exception:  # noqa: BLE001 - the database went away: the next round tries again
            log.warning("clients.prune_failed", exc_info=True)


def create_app(settings: Settings) -> FastAPI:
    svc = build_services(settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # what startup built (modules, routes, templates, tables) lives as long as the process: freezing it
        # keeps the cyclic collector's full passes from walking it again and again; one such pass was a
        # console page's p95 (~100 ms at 10,000 clients, bench/console_pages.py)
        gc.collect()
        gc.freeze()
        svc.reconciler.start()
        svc.reconciler.kick()  # a first pass at start-up repairs whatever drifted while no MetaServer ran
        driver = RolloutDriver(svc).start()  # drives rollout plans while this process holds the lease
        _app.state.rollout_driver = driver
        # the console's summaries over every live client read now, off the request path: no first view pays
        # a large fleet's scan (docs/deployment.md, "First views")
        warmer = SummaryWarmer(svc).start()
        pruner = asyncio.create_task(_prune_clients(svc)) if settings.client_prune_s > 0 else None
        yield
        if pruner is not None:
            pruner.cancel()
        warmer.stop()
        driver.stop()
        svc.reconciler.stop()
        svc.engine.dispose()

    app = FastAPI(title="ykafka MetaServer", version="1", lifespan=lifespan, responses=ERROR_RESPONSES,
                  description="Auth grants, ACL, cluster registry, client reports, hot-config push, alerts and "
                              "pipeline aggregates for ykafka.")
    app.state.services = svc
    # a misconfigured single sign-on (a missing setting, a role mapping that names no role) stops the start
    app.state.oidc_client = OidcClient(settings) if sso_enabled(settings) else None
    app.add_middleware(SingleValuedQuery)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)  # before parsing: 413, nothing buffered
    app.include_router(routes_sdk.router)
    app.include_router(routes_admin.router)
    app.include_router(routes_topics.router)
    app.include_router(routes_config.router)
    app.include_router(routes_observe.router)
    app.include_router(routes_placements.admin)
    app.include_router(routes_placements.sdk)
    app.include_router(routes_offsets.router)
    app.include_router(routes_messages.router)
    app.include_router(rollout_routes.router)
    app.include_router(routes_notify.router)
    install_console(app)

    @app.get("/health", tags=["ops"])
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.exception_handler(AuthFailed)
    async def _auth_failed(_request: Request, _exc: AuthFailed) -> JSONResponse:
        return JSONResponse({"detail": "authentication failed"}, status_code=401,
                            headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_errors(exc)}, status_code=422)  # never the input back

    @app.exception_handler(RateLimited)
    async def _rate_limited(_request: Request, exc: RateLimited) -> JSONResponse:
        return JSONResponse({"detail": "too many failed authentications; retry later"}, status_code=429,
                            headers={"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(ConfigRejected)
    async def _rejected(_request: Request, exc: ConfigRejected) -> JSONResponse:
        return JSONResponse({"detail": exc.message, "errors": exc.errors}, status_code=422)

    @app.exception_handler(ConfigBusy)
    async def _busy(_request: Request, exc: ConfigBusy) -> JSONResponse:
        return JSONResponse({"detail": exc.message, "errors": exc.errors}, status_code=409)

    @app.exception_handler(guards.GuardRulesInvalid)
    async def _bad_rules(_request: Request, exc: guards.GuardRulesInvalid) -> JSONResponse:
        return JSONResponse({"detail": "invalid guard rules", "errors": exc.errors}, status_code=422)

    @app.exception_handler(ApolloError)
    async def _apollo(_request: Request, exc: ApolloError) -> JSONResponse:
        log.error("config center call failed", error=str(exc))
        return JSONResponse({"detail": f"config center error: {exc}"}, status_code=502)

    return app


def create_app_from_env() -> FastAPI:
    """Factory for uvicorn workers: settings come from the YKAFKA_MS_* environment."""
    return create_app(Settings.from_env())


def configure_logging(level: str = "info") -> None:
    import logging

    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), format="%(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"),
                    structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
