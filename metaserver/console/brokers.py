"""librdkafka connection properties of a registered cluster (bootstrap servers and SASL), for the console's
direct broker work: DLQ reads and replays, topic creation, group deletion, lag reads."""

from __future__ import annotations

from typing import Any

from .. import db, registry


def connection(svc: Any, cluster: str | None) -> tuple[str, dict[str, Any]]:
    """(cluster name, properties) of ``cluster``, or of the default cluster when None; LookupError if unknown."""
    with db.read(svc.engine) as conn:
        clusters = registry.all_clusters(conn)
    name = cluster or svc.settings.default_cluster or (sorted(clusters)[0] if clusters else "")
    if name not in clusters:
        raise LookupError("unknown cluster: not in the registry")
    spec = clusters[name]
    props: dict[str, Any] = {"bootstrap.servers": spec["bootstrap_servers"]}
    sasl = spec.get("sasl")
    if sasl:
        props.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": sasl["mechanism"],
                      "sasl.username": sasl["username"], "sasl.password": sasl["password"]})
    return name, props
