"""Admin API of consumer-group offset resets (``ykafka admin groups reset``): a dry run answers the plan, a
reset answers the job, whose steps ``GET /v1/admin/offset-resets/{id}`` follows."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import JSONResponse
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from ykafka import acl as acl_patterns

from ..console.brokers import connection
from ..domain.apollo import ApolloError
from ..domain.hotconfig import ConfigRejected
from ..kafka import offset_jobs
from ..kafka.offsets import GroupOffsets, ResetRefused, ResetSpec
from ..schemas import Strict
from ..services import Services, services
from .admin import operator

router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[Depends(operator)])


class ResetBody(Strict):
    to: Literal["earliest", "latest", "timestamp", "offset", "shift"]
    value: int | None = Field(default=None, ge=-(2**62), le=2**62)
    topic: str | None = Field(default=None, min_length=1, max_length=249)
    partitions: list[int] | None = Field(default=None, max_length=10_000)
    cluster: str | None = Field(default=None, max_length=200)
    dry_run: bool = False


def _spec(body: ResetBody) -> ResetSpec:
    if body.topic is not None and acl_patterns.name_problem(body.topic):
        raise ResetRefused("not a valid topic name")
    return ResetSpec(body.to, body.value, body.topic,
                     tuple(sorted(set(body.partitions))) if body.partitions is not None else None)


def _broker(svc: Services, cluster: str | None) -> tuple[str, GroupOffsets]:
    try:
        name, props = connection(svc, cluster)
    except LookupError as exc:
        raise ResetRefused(str(exc.args[0])) from None
    return name, GroupOffsets(props)


@router.post("/groups/{group}/offsets/reset")
async def reset(group: str, body: ResetBody, who: str = Depends(operator),
                svc: Services = Depends(services)) -> Any:
    """Dry run: each partition's current and new offset and the lag after, and how the reset would go. Else
    the reset: done at once for an empty group, in steps for a group of ykafka consumers, refused otherwise."""
    if acl_patterns.name_problem(group):
        raise HTTPException(422, "not a valid group name")
    try:
        spec = _spec(body)
        spec.check()
        cluster, broker = await run_in_threadpool(_broker, svc, body.cluster)
        if body.dry_run:
            return await run_in_threadpool(offset_jobs.preview, broker, svc, group, spec)
        return await run_in_threadpool(offset_jobs.start, svc, broker, cluster, group, spec, who)
    except ResetRefused as exc:
        return JSONResponse({"detail": str(exc)}, status_code=409)
    except (ConfigRejected, ApolloError) as exc:
        return JSONResponse({"detail": f"hot config: {exc}"}, status_code=409)


@router.get("/offset-resets/{job_id}")
def reset_job(job_id: str, svc: Services = Depends(services)) -> Any:
    job = offset_jobs.get(svc, job_id[:32])
    if job is None:
        raise HTTPException(404, "no such reset")
    return job
