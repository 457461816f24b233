"""Admin API for topics: ``POST /v1/admin/topics`` creates a topic for an app in one call.

On a secured cluster apps may write and read their topics but not create them (docs/metaserver.md, threat
model): topics are made by the MetaServer's own principal. The console does it in two steps (an app owner's
request, an admin's approval); an admin with the API or ``ykafka admin topics create`` gets the same steps at
once through the same code (``metaserver.console.provision``): a request row, approved, audited.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from starlette.concurrency import run_in_threadpool

from ..console import provision
from ..schemas import TopicCreate
from ..services import Services, services
from ..storage import db
from .admin import operator

router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[Depends(operator)])


def _create(svc: Services, body: TopicCreate, who: str) -> dict[str, Any]:
    cluster = body.cluster
    if cluster is None:
        with db.read(svc.engine) as conn:
            loads = provision.cluster_loads(conn, svc.settings.renew_interval)
        if not loads:
            raise provision.RequestError("cluster: no active registered cluster")
        cluster = loads[0]["name"]
    form = {"kind": "topic", "name": body.name, "partitions": str(body.partitions),
            "retention_h": repr(body.retention_hours), "note": "created through the admin API"}
    req_id = provision.submit(svc.engine, who, body.app_id, form)
    # a step that fails leaves the request pending on the console's Requests page: approving it there redoes only
    # what is missing
    done = provision.approve(svc, req_id, cluster, who)
    return {"id": req_id, "name": body.name, "app_id": body.app_id, "partitions": body.partitions, **done}


@router.post("/topics", status_code=201)
async def create_topic(body: TopicCreate, who: str = Depends(operator),
                       svc: Services = Depends(services)) -> dict[str, Any]:
    """Create the topic on the cluster, grant the app produce + consume, point the topic's route there."""
    try:
        return await run_in_threadpool(_create, svc, body, who)
    except provision.RequestError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
