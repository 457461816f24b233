"""Admin API of message browsing (``ykafka admin messages``): the same bounded read as the console's, values
shown (an admin token), the topic's masking rules applied, every read audited."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ykafka import acl as acl_patterns

from ..console.browse_views import _read
from ..domain import audit
from ..kafka import browse
from ..services import Services, services
from ..storage import db
from .admin import operator

router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[Depends(operator)])


@router.get("/topics/{topic}/messages")
async def messages(topic: str, cluster: str | None = Query(default=None, max_length=200),
                   partition: str | None = Query(default=None, max_length=10),
                   offset: str | None = Query(default=None, max_length=20),
                   since: str | None = Query(default=None, max_length=40),
                   until: str | None = Query(default=None, max_length=40),
                   key: str | None = Query(default=None, max_length=200),
                   limit: str | None = Query(default=None, max_length=5),
                   format: str = Query(default="text", max_length=8),
                   who: str = Depends(operator), svc: Services = Depends(services)) -> Any:
    if acl_patterns.name_problem(topic):
        raise HTTPException(422, "not a valid topic name")
    q = {"cluster": cluster or "", "partition": partition or "", "offset": offset or "", "since": since or "",
         "until": until or "", "key": key or "", "limit": limit or "", "format": format}
    try:
        name, result = await run_in_threadpool(_read, svc, topic, q, True)
    except browse.BrowseRefused as exc:
        return JSONResponse({"detail": str(exc)}, status_code=409)
    with db.write(svc.engine) as conn:
        audit.record(conn, who, "topic.browse", f"topic:{topic}@{name}", None,
                     {**{k: v for k, v in q.items() if v and k != "cluster"}, "messages": len(result["messages"]),
                      "values": True, "masked": bool(result["masks"])})
    return {**result, "cluster": name}
