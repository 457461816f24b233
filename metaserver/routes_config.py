"""Admin hot-config endpoints: push (optionally gray, optionally dry run), read, roll back, merge gray."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException

from . import audit, db, hotconfig, registry
from .apollo import ApolloOpenApi
from .rollouts import guardcheck, targeting
from .routes_admin import operator
from .schemas import ConfigPush, ScopeBody
from .services import Services, services

router = APIRouter(prefix="/v1/admin/config", tags=["admin"], dependencies=[Depends(operator)])


def _api(svc: Services) -> ApolloOpenApi:
    if svc.apollo is None:
        raise HTTPException(status_code=503, detail="no config center configured (--configcenter-url)")
    return svc.apollo


@router.post("")
def push(body: ConfigPush, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Validate every key with the catalog, then write and release through Apollo (gray when ``ips`` or
    ``labels`` are given)."""
    if body.targets is not None and (body.ips is not None or body.labels is not None):
        raise hotconfig.ConfigRejected({"targets": "give targets or ips / labels, not both"})
    plan = hotconfig.validate(body.scope, dict(body.set), list(body.delete), body.ips, body.labels)
    with db.read(svc.engine) as conn:
        hotconfig.check_registered(plan, registry.all_clusters(conn))
        hotconfig.check_group_protocol(plan, conn, svc.settings.renew_interval)
    api = _api(svc)
    before = hotconfig.plan_changes(api, plan)
    guardcheck.enforce(svc, plan, before)  # a change breaking a guard rule: 422 naming the rule, dry run too
    reach = targeting.resolve(svc, plan, body.targets)
    out: dict[str, Any] = {"scope": str(plan.scope), "namespace": plan.namespace, "dry_run": body.dry_run,
                           "changes": plan.changes, "ips": plan.ips,
                           "labels": plan.labels if body.targets is None or not body.targets.per_instance() else None,
                           "reach": reach}
    if body.dry_run:
        return out
    out.update(hotconfig.apply(api, plan, who, body.comment))
    with db.write(svc.engine) as conn:
        changed = [c["key"] for c in plan.changes]
        audit.record(conn, who, "config.gray" if plan.gray else "config.set", plan.namespace,
                     {k: before.get(k) for k in changed},
                     {"values": {c["key"]: c["after"] for c in plan.changes}, "ips": plan.ips,
                      "labels": plan.labels, "release": out.get("release"),
                      "targets": body.targets.describe() if body.targets else None})
    return out


@router.get("")
def get_config(scope: str, svc: Services = Depends(services)) -> dict[str, Any]:
    """The released values of the scope's namespace (and its gray branch, if any)."""
    return hotconfig.current(_api(svc), hotconfig.parse_scope(scope))


@router.post("/rollback")
def rollback(body: ScopeBody, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Restore the namespace's previous release (Apollo rollback of the latest one)."""
    scope = hotconfig.parse_scope(body.scope)
    api = _api(svc)
    before = hotconfig.current(api, scope)
    result = hotconfig.rollback(api, scope)
    after = hotconfig.current(api, scope)
    with db.write(svc.engine) as conn:
        audit.record(conn, who, "config.rollback", scope.namespace(), before["released"], after["released"])
    return {**result, **after}


@router.post("/gray/merge")
def merge_gray(body: ScopeBody, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Promote the gray values to every client (Apollo branch merge) and close the branch."""
    scope = hotconfig.parse_scope(body.scope)
    api = _api(svc)
    before = hotconfig.current(api, scope)
    result = hotconfig.merge_gray(api, scope, who)
    after = hotconfig.current(api, scope)
    with db.write(svc.engine) as conn:
        audit.record(conn, who, "config.gray_merge", scope.namespace(), before["released"], after["released"])
    return {**result, **after}


@router.post("/gray/abandon")
def abandon_gray(body: ScopeBody, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Drop the gray branch; its clients fall back to the main release."""
    scope = hotconfig.parse_scope(body.scope)
    api = _api(svc)
    before = hotconfig.current(api, scope)
    result = hotconfig.abandon_gray(api, scope)
    with db.write(svc.engine) as conn:
        audit.record(conn, who, "config.gray_abandon", scope.namespace(), before["gray"], None)
    return result
