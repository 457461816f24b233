"""SDK-facing endpoints: grant, renew, client report. The contract the SDK builds against."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ..domain import auth, clients
from ..schemas import ClientReport, Grant, GrantRequest, RenewRequest, Want

router = APIRouter(tags=["sdk"])

_AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "authentication failed (never says which part)"},
    429: {"description": "too many failed authentications from this app or source IP"},
}


def source_ip(request: Request) -> str | None:
    return request.client.host if request.client else None


@router.post("/v1/auth/grant", responses={200: {"model": Grant}, **_AUTH_RESPONSES})
async def grant(body: GrantRequest, request: Request) -> Response:
    """Exchange a signed request (X-Ykafka-App/-Timestamp/-Nonce/-Signature) for a grant."""
    raw = await request.body()
    svc = request.app.state.services
    args = (svc, request.headers, request.method, request.url.path, raw, body.app_id, body.client_id,
            source_ip(request), _wants(body.want))
    if svc.engine.dialect.name == "sqlite":
        # a few hundred microseconds of local file I/O: cheaper inline than a hop to the thread pool
        return JSONResponse(auth.signed_grant(*args))
    return JSONResponse(await run_in_threadpool(auth.signed_grant, *args))


@router.post("/v1/auth/renew", responses={200: {"model": Grant}, **_AUTH_RESPONSES})
async def renew(request: Request, body: RenewRequest | None = None,
                authorization: str | None = Header(default=None)) -> Response:
    """A fresh grant (new token, current ACL and reachable clusters) for the holder of an unexpired token."""
    svc = request.app.state.services
    wants = _wants(body.want) if body else []

    def work() -> dict[str, Any]:
        claims = auth.check_bearer(svc, authorization, source_ip(request))
        return auth.renew(svc, claims, wants)

    return JSONResponse(await run_in_threadpool(work))


def _wants(wants: list[Want]) -> list[tuple[str, str]]:
    return [(want.namespace, want.cluster) for want in wants]


@router.post("/v1/clients/report", status_code=204, responses=_AUTH_RESPONSES)
async def report(body: ClientReport, request: Request, authorization: str | None = Header(default=None)) -> Response:
    """Record a client's self-description (start-up and every heartbeat)."""
    svc = request.app.state.services

    def work() -> Response:
        claims = auth.check_bearer(svc, authorization, source_ip(request))
        if claims.app_id != body.app_id:
            return JSONResponse({"detail": "report names another app than its token"}, status_code=403)
        clients.store(svc.engine, body)
        return Response(status_code=204)

    return await run_in_threadpool(work)
