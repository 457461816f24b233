"""Manual failover / failback of a cluster (or one topic) for every client, through the MetaServer (the
``ykafka admin failover`` command is in :mod:`ykafka.admin.cli`).

The switch is hot config (``route.active``, optionally ``route.failover``) pushed through the admin API, so
it is validated, audited and followed by every producer of the scope; ``primary`` starts the failback sync.
"""

from __future__ import annotations

from typing import Any

from ykafka.catalog import Scope, ScopeKind


def failover_changes(to: str, cluster: str | None = None, topic: str | None = None,
                     mode: str | None = None) -> list[tuple[Scope, str, str]]:
    """Hot-config changes for ``ykafka admin failover``: move writes of a cluster's (or one topic's)
    traffic to its standby (``to="standby"``) or back (``to="primary"``; starts the failback sync).
    The CLI pushes them through the MetaServer admin API."""
    if to not in ("primary", "standby"):
        raise ValueError("to must be primary or standby")
    if (cluster is None) == (topic is None):
        raise ValueError("give exactly one of cluster or topic")
    scope = Scope(ScopeKind.CLUSTER, cluster) if cluster is not None else Scope(ScopeKind.TOPIC, str(topic))
    changes = [(scope, "route.active", to)]
    if mode is not None:
        if mode not in ("auto", "manual"):
            raise ValueError("mode must be auto or manual")
        changes.append((scope, "route.failover", mode))
    return changes


def push_failover(admin: Any, to: str, cluster: str | None = None, topic: str | None = None,
                  mode: str | None = None, dry_run: bool = False) -> dict[str, Any]:
    """Push :func:`failover_changes` through the MetaServer admin API (``admin`` is a
    :class:`ykafka.admin.client.AdminClient`); every producer of the scope follows."""
    if to == "clear":  # drop the manual switch: health and route.failover decide again
        scope = failover_changes("primary", cluster=cluster, topic=topic)[0][0]
        return dict(admin.push_config(str(scope), {}, delete=["route.active"], dry_run=dry_run,
                                      comment="failover: manual switch cleared"))
    changes = failover_changes(to, cluster=cluster, topic=topic, mode=mode)
    scope = changes[0][0]
    return dict(admin.push_config(str(scope), {name: value for _, name, value in changes}, dry_run=dry_run,
                                  comment=f"failover: writes to {to}"))


def writes_to(admin: Any, cluster: str) -> str:
    """Where a cluster's writes go by its own hot config (``route.active`` at ``cluster:<name>``)."""
    try:
        released = admin.get_config(str(Scope(ScopeKind.CLUSTER, cluster))).get("released") or {}
    except Exception:  # no namespace yet: nothing was ever switched
        return "primary"
    return str(released.get("route.active", "primary"))
