"""Topic placements over HTTP: the admin's table (bulk, paged) and the SDK's one-topic lookup."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from ykafka import acl as acl_patterns

from ..domain import audit, auth, placements
from ..schemas import Strict
from ..services import Services, services
from ..storage import db
from .admin import operator
from .sdk import source_ip

admin = APIRouter(prefix="/v1/admin/placements", tags=["admin"], dependencies=[Depends(operator)])
sdk = APIRouter(tags=["sdk"])


class PlacementsPut(Strict):
    placements: dict[str, str] = Field(description="topic -> registered cluster", max_length=placements.MAX_BULK)


def _rejected(exc: placements.PlacementRejected) -> JSONResponse:
    shown = dict(list(exc.errors.items())[:50])
    return JSONResponse({"detail": f"{len(exc.errors)} placement(s) rejected; nothing written", "errors": shown},
                        status_code=422)


@admin.put("")
def put_placements(body: PlacementsPut, who: str = Depends(operator),
                   svc: Services = Depends(services)) -> Any:
    """Place (or re-place) up to 10,000 topics in one transaction; all or nothing. Moving a topic that has
    traffic is a live route switch (``route.cluster`` at topic scope), not a re-placement."""
    try:
        with db.write(svc.engine) as conn:
            written = placements.put(conn, body.placements, who)
            sample = dict(list(body.placements.items())[:20])
            audit.record(conn, who, "placement.put", f"placements:{written}", None, sample)
    except placements.PlacementRejected as exc:
        return _rejected(exc)
    return {"written": written}


@admin.get("")
def list_placements(prefix: str = Query(default="", max_length=255), cluster: str | None = Query(default=None),
                    after: str = Query(default="", max_length=255), limit: int = Query(default=100, ge=1, le=1000),
                    svc: Services = Depends(services)) -> dict[str, Any]:
    """One page in topic order; pass the last topic as ``after`` for the next page."""
    with db.read(svc.engine) as conn:
        rows = placements.page(conn, prefix, cluster, after, limit)
    return {"placements": rows, "next_after": rows[-1]["topic"] if len(rows) == limit else None}


@admin.get("/counts")
def placement_counts(svc: Services = Depends(services)) -> dict[str, int]:
    """Topics per cluster."""
    with db.read(svc.engine) as conn:
        return placements.counts(conn)


@admin.delete("/{topic}", status_code=204)
def delete_placement(topic: str, who: str = Depends(operator), svc: Services = Depends(services)) -> None:
    with db.write(svc.engine) as conn:
        before = placements.lookup(conn, topic)
        if before is None or not placements.remove(conn, topic):
            raise HTTPException(status_code=404, detail="no placement for this topic")
        audit.record(conn, who, "placement.delete", f"topic:{topic}", {"cluster": before}, None)


@sdk.get("/v1/placements/{topic}", responses={404: {"description": "the topic has no placement"}})
async def get_placement(topic: str, request: Request, authorization: str | None = Header(default=None)) -> Any:
    """The cluster holding ``topic``, for a client whose ACL lets it produce to or consume from it."""
    svc: Services = request.app.state.services

    def work() -> Any:
        claims = auth.check_bearer(svc, authorization, source_ip(request))
        acl, cluster = placements.for_client(svc.engine, claims.app_id, topic)
        if not (acl_patterns.check(acl, "produce", topic) or acl_patterns.check(acl, "consume", topic)):
            return JSONResponse({"detail": "the app's ACL does not cover this topic"}, status_code=403)
        if cluster is None:
            return JSONResponse({"detail": "no placement for this topic"}, status_code=404)
        return {"topic": topic, "cluster": cluster}

    return await run_in_threadpool(work)
