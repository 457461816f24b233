"""Admin API of guarded rollouts: the guard rules (read by every admin, replaced whole, audited) and rollout
plans (start, list, pause / resume / abort / force)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import Field

from ..domain import hotconfig
from ..routes.admin import operator
from ..schemas import Strict
from ..services import Services, services
from . import guards, plans

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


# --- rollout plans -----------------------------------------------------------------------------------

@router.post("/rollouts", status_code=201)
def create_plan(body: plans.PlanSpec, who: str = Depends(operator),
                svc: Services = Depends(services)) -> dict[str, Any]:
    """Start a rollout plan: validated like a push (catalog, registry, guard rules); the driver publishes it."""
    return plans.create(svc, body, who)


@router.get("/rollouts")
def list_plans(scope: str | None = None, svc: Services = Depends(services)) -> list[dict[str, Any]]:
    """Plans, newest first (of one scope with ``scope``), with their decisions and evidence."""
    namespace = hotconfig.parse_scope(scope).namespace() if scope else None
    return plans.listing(svc, namespace)


@router.get("/rollouts/driver")
def driver_state(request: Request, svc: Services = Depends(services)) -> dict[str, Any]:
    """Which MetaServer drives the plans: the lease's holder and expiry, and this process's own driver id."""
    from sqlalchemy import select

    from ..storage import db
    from .models import rollout_lease

    with db.read(svc.engine) as conn:
        row = conn.execute(select(rollout_lease)).mappings().first()
    mine = getattr(request.app.state, "rollout_driver", None)
    return {"holder": row["holder"] if row else None, "expires_at": row["expires_at"] if row else None,
            "this": mine.holder if mine is not None else None}


@router.get("/rollouts/{plan_id}")
def get_plan(plan_id: int, svc: Services = Depends(services)) -> dict[str, Any]:
    try:
        return plans.get(svc, plan_id)
    except LookupError:
        raise HTTPException(status_code=404, detail="plan not found") from None


@router.post("/rollouts/{plan_id}/action")
def act(plan_id: int, body: plans.PlanAction, who: str = Depends(operator),
        svc: Services = Depends(services)) -> dict[str, Any]:
    """pause / resume / abort (drops the canary's gray release) / force (judge the step now), audited."""
    try:
        return plans.control(svc, plan_id, body.action, who)
    except LookupError:
        raise HTTPException(status_code=404, detail="plan not found") from None
