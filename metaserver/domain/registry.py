"""The cluster registry: rows ↔ the JSON the grant and the admin API carry (no credentials: each app gets its
own, metaserver/domain/credentials.py)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, RowMapping, select

from ..storage.models import clusters


def security_json(protocol: str | None, mechanism: str | None, ca_pem: str | None) -> dict[str, Any] | None:
    """The cluster's broker-side security (no secret in it), or None for an open (PLAINTEXT) cluster."""
    if not protocol or protocol == "PLAINTEXT":
        return None
    return {"protocol": protocol, "mechanism": mechanism or "SCRAM-SHA-512", "ca_pem": ca_pem}


def cluster_json(row: RowMapping) -> dict[str, Any]:
    return {"name": row["name"], "bootstrap_servers": row["bootstrap_servers"], "dc": row["dc"],
            "standby": row["standby"], "status": row["status"],
            "security": security_json(row["security_protocol"], row["sasl_mechanism"], row["ssl_ca"])}


def all_clusters(conn: Connection) -> dict[str, dict[str, Any]]:
    rows = conn.execute(select(clusters).order_by(clusters.c.name)).mappings()
    return {row["name"]: cluster_json(row) for row in rows}


def default_cluster(app_default: str | None, server_default: str | None,
                    registry: dict[str, dict[str, Any]]) -> str | None:
    """The app's own default, else the server's, else the first active cluster by name."""
    if app_default:
        return app_default
    if server_default:
        return server_default
    for name in sorted(registry):
        if registry[name]["status"] == "active":
            return name
    return None
