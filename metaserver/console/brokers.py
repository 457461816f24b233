"""librdkafka connection properties of a registered cluster (bootstrap servers, and on a secured cluster the
MetaServer's own super user), for the console's direct broker work: DLQ reads and replays, topic creation,
group deletion, lag reads."""

from __future__ import annotations

from typing import Any

from ..domain import registry
from ..kafka import admin as kafka_admin
from ..storage import db


def connection(svc: Any, cluster: str | None) -> tuple[str, dict[str, Any]]:
    """(cluster name, properties) of ``cluster``, or of the default cluster when None; LookupError if unknown."""
    with db.read(svc.engine) as conn:
        clusters = registry.all_clusters(conn)
    name = cluster or svc.settings.default_cluster or (sorted(clusters)[0] if clusters else "")
    if name not in clusters:
        raise LookupError("unknown cluster: not in the registry")
    props = kafka_admin.connection(clusters[name], svc.settings)
    props.pop("socket.timeout.ms", None)
    return name, props
