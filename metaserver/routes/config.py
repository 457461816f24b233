"""Admin hot-config endpoints: push (optionally gray, optionally dry run), read, roll back, merge gray."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException

from ..domain import configwrites, hotconfig, registry
from ..domain.apollo import ApolloOpenApi
from ..rollouts import targeting
from ..schemas import ConfigPush, ScopeBody
from ..services import Services, services
from ..storage import db
from .admin import operator

router = APIRouter(prefix="/v1/admin/config", tags=["admin"], dependencies=[Depends(operator)])


def _api(svc: Services) -> ApolloOpenApi:
    if svc.apollo is None:
        raise HTTPException(status_code=503, detail="no config center configured (--configcenter-url)")
    return svc.apollo


@router.post("")
def push(body: ConfigPush, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Validate every key with the catalog and the guard rules (a breaking change: 422 naming the rule, dry run
    too), then write and release through Apollo (gray when ``ips``, ``labels`` or ``targets`` are given), all or
    nothing (``configwrites``)."""
    if body.targets is not None and (body.ips is not None or body.labels is not None):
        raise hotconfig.ConfigRejected({"targets": "give targets or ips / labels, not both"})
    plan = hotconfig.validate(body.scope, dict(body.set), list(body.delete), body.ips, body.labels)
    with db.read(svc.engine) as conn:
        hotconfig.check_registered(plan, registry.all_clusters(conn))
        hotconfig.check_group_protocol(plan, conn, svc.settings.renew_interval)
    _api(svc)
    if body.dry_run:
        configwrites.preview(svc, plan)
        result = {"reach": targeting.resolve(svc, plan, body.targets)}
    else:
        result = configwrites.push(svc, plan, who, body.comment,
                                   extra={"targets": body.targets.describe() if body.targets else None},
                                   target=lambda p: targeting.resolve(svc, p, body.targets))
    out: dict[str, Any] = {"scope": str(plan.scope), "namespace": plan.namespace, "dry_run": body.dry_run,
                           "changes": plan.changes, "ips": plan.ips,
                           "labels": plan.labels if body.targets is None or not body.targets.per_instance() else None,
                           "reach": result["reach"]}
    out.update({k: v for k, v in result.items() if k not in ("before", "reach")})
    return out


@router.get("")
def get_config(scope: str, svc: Services = Depends(services)) -> dict[str, Any]:
    """The released values of the scope's namespace (and its gray branch, if any)."""
    return hotconfig.current(_api(svc), hotconfig.parse_scope(scope))


@router.post("/rollback")
def rollback(body: ScopeBody, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Restore the namespace's previous release (Apollo rollback of the latest one)."""
    done = _scope_action(svc, body, "rollback", who)
    return {**done["result"], **done["after"]}


@router.post("/gray/merge")
def merge_gray(body: ScopeBody, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Promote the gray values to every client (Apollo branch merge) and close the branch."""
    done = _scope_action(svc, body, "promote", who)
    return {**done["result"], **done["after"]}


@router.post("/gray/abandon")
def abandon_gray(body: ScopeBody, who: str = Depends(operator), svc: Services = Depends(services)) -> dict[str, Any]:
    """Drop the gray branch; its clients fall back to the main release."""
    result: dict[str, Any] = _scope_action(svc, body, "abandon", who)["result"]
    return result


def _scope_action(svc: Services, body: ScopeBody, action: str, who: str) -> dict[str, Any]:
    scope = hotconfig.parse_scope(body.scope)
    _api(svc)
    return configwrites.scope_action(svc, scope, action, who)
