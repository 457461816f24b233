"""Admin API of guarded rollouts: the guard rules (read by every admin, replaced whole, audited)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import Field

from ..routes_admin import operator
from ..schemas import Strict
from ..services import Services, services
from . import guards

router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[Depends(operator)])


class GuardRulesBody(Strict):
    body: str = Field(max_length=200_000, description="the rules as YAML (``rules: [...]``, configs/guardrules.yaml)")


def guard_json(found: guards.InForce) -> dict[str, Any]:
    return {"source": found.source, "version": found.version, "updated_by": found.updated_by,
            "updated_at": found.updated_at, "body": found.body,
            "rules": [r.model_dump(exclude_none=True) for r in found.rules]}


@router.get("/guards")
def get_guards(svc: Services = Depends(services)) -> dict[str, Any]:
    """The guard rules in force and where they come from (``file``, or ``console`` after an edit)."""
    return guard_json(guards.in_force(svc.engine))


@router.put("/guards")
def put_guards(body: GuardRulesBody, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Replace the rules (checked first: a malformed rule is 422 and nothing is stored); audited."""
    return guard_json(guards.save(svc.engine, body.body, who))
