"""The cluster registry: rows ↔ the JSON the grant and the admin API carry."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, RowMapping, select

from .models import clusters


def cluster_json(row: RowMapping, redact: bool = False) -> dict[str, Any]:
    sasl = None
    if row["sasl_mechanism"]:
        sasl = {"mechanism": row["sasl_mechanism"], "username": row["sasl_username"],
                "password": "***" if redact else row["sasl_password"]}
    return {"name": row["name"], "bootstrap_servers": row["bootstrap_servers"], "dc": row["dc"],
            "standby": row["standby"], "status": row["status"], "sasl": sasl}


def all_clusters(conn: Connection, redact: bool = False) -> dict[str, dict[str, Any]]:
    rows = conn.execute(select(clusters).order_by(clusters.c.name)).mappings()
    return {row["name"]: cluster_json(row, redact) for row in rows}


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
