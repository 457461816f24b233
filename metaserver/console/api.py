"""Console users over the admin API (admin token): what ``ykafka admin users`` calls."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, Field

from ..domain import audit
from ..routes.admin import operator
from ..services import Services, services
from ..storage import db
from . import users

router = APIRouter(prefix="/v1/admin/users", tags=["admin"], dependencies=[Depends(operator)])


class UserCreate(BaseModel):
    username: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=8, max_length=256)
    role: str = Field(default="viewer", max_length=16)
    replace: bool = False


@router.get("")
def list_users(svc: Services = Depends(services)) -> list[dict[str, Any]]:
    return users.list_users(svc.engine)


@router.post("", status_code=201)
def create_user(body: UserCreate, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Create a console user (or reset one with ``replace``); the password is stored only as an argon2 hash."""
    try:
        created = users.create(svc.engine, body.username, body.password, body.role, replace=body.replace)
    except users.UserError as exc:
        raise HTTPException(status_code=422, detail=str(exc)) from None
    if not created:
        raise HTTPException(status_code=409, detail="user exists (use replace to reset it)")
    with db.write(svc.engine) as conn:
        audit.record(conn, who, "user.create", body.username, None, {"role": body.role})
    return {"username": body.username, "role": body.role}
