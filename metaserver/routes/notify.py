"""Admin API of alert notifications: the channels, routes and silences in force (secrets masked, or in clear
with ``reveal=true`` for the pipeline, which holds the admin token) and their replacement, checked and audited."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from pydantic import Field

from ..domain import notifications
from ..schemas import Strict
from ..services import Services, services
from .admin import operator

router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[Depends(operator)])


class NotifyBody(Strict):
    body: str = Field(max_length=200_000, description="the notify section as YAML (channels, routes, silences, "
                                                      "retry); masked secrets sent back keep the stored ones")


def notify_json(found: notifications.InForce, reveal: bool = False) -> dict[str, Any]:
    return {"source": found.source, "version": found.version, "updated_by": found.updated_by,
            "updated_at": found.updated_at, "body": found.masked_yaml(),
            "config": found.config if reveal else found.masked()}


@router.get("/notify")
def get_notify(reveal: bool = False, svc: Services = Depends(services)) -> dict[str, Any]:
    """The section in force and where it comes from (``file``, or ``console`` after an edit)."""
    return notify_json(notifications.in_force(svc.engine), reveal)


@router.put("/notify")
def put_notify(body: NotifyBody, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Replace the section (checked as the pipeline checks its file: a bad one is 422, nothing stored); audited."""
    try:
        return notify_json(notifications.save(svc.engine, body.body, who))
    except notifications.NotifyInvalid as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
