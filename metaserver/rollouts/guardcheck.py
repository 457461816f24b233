"""Guard rules against the live system: what :func:`guards.judge` reads comes from the config center (released
values, every topic's namespace), the MetaServer's tables (placements, registry) and the brokers (a topic's
partition count). One call per hot-config write path: admin API push, console preview and publish, plan steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ykafka.admin.topics import TopicAdminError, partition_count
from ykafka.catalog import Scope, ScopeKind

from ..domain import placements, registry
from ..domain.hotconfig import PushPlan
from ..domain.reach import scope_of
from ..services import Services
from ..storage import db
from . import guards

PARTITIONS_TIMEOUT_S = 5.0


def world(svc: Services) -> guards.World:
    api = svc.apollo

    def released(scope: Scope) -> Mapping[str, str]:
        if api is None:
            return {}
        release = api.latest_release(scope.namespace())
        return dict((release or {}).get("configurations") or {})

    def topics() -> dict[str, Mapping[str, str]]:
        if api is None:
            return {}
        out: dict[str, Mapping[str, str]] = {}
        for ns in api.namespaces():
            scope = scope_of(str(ns.get("namespaceName") or ""))
            if scope is not None and scope.kind is ScopeKind.TOPIC:
                out[scope.name] = {str(i.get("key")): str(i.get("value") or "") for i in ns.get("items") or []
                                   if i.get("key")}
        return out

    def cluster_of(topic: str, layer: Mapping[str, str]) -> str:
        if layer.get("route.cluster"):
            return str(layer["route.cluster"])
        return placements.lookup_on(svc.engine, topic) or default

    def partitions(topic: str, cluster: str) -> int | None:
        from ..console.brokers import connection

        try:
            _, props = connection(svc, cluster or None)
            return partition_count(props, topic, timeout=PARTITIONS_TIMEOUT_S) or 0  # None: no such topic
        except (LookupError, TopicAdminError):
            return None

    with db.read(svc.engine) as conn:
        names = sorted(registry.all_clusters(conn))
    default = svc.settings.default_cluster or (names[0] if names else "")
    return guards.World(released, topics, partitions, cluster_of, default)


def enforce(svc: Services, plan: PushPlan, before: Mapping[str, Any]) -> None:
    """Refuse (ConfigRejected, 422, nothing written) a change that breaks a guard rule in force."""
    rules = guards.in_force(svc.engine).rules
    if not rules:
        return
    guards.enforce(plan, {k: str(v) for k, v in before.items()}, rules, world(svc))
