"""What the admin API and the console show of an app's broker-side security: its principal on each
cluster, the bindings it should have there against those in force at the last reconcile, and when that was."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, select

from ..domain import credentials
from ..storage.models import kafka_reconciles
from . import acls as kafka_acls
from .acls import Binding


def app_view(conn: Connection, app: dict[str, Any]) -> dict[str, Any]:
    """``{"app_id", "clusters": [{cluster, principals, desired, in_force, missing, extra, reconciled_at, ok,
    error}]}``; bindings as ``OPERATION RESOURCE:PATTERN:NAME`` strings, sorted."""
    now = time.time()
    rows = credentials.of_app(conn, app["app_id"])
    reconciles = {row["cluster"]: dict(row) for row in conn.execute(select(kafka_reconciles)).mappings()}
    out = []
    for cluster in sorted({row["cluster"] for row in rows}):
        live = [row for row in rows
                if row["cluster"] == cluster and (row["retire_at"] is None or row["retire_at"] > now)]
        principals = {kafka_acls.principal(row["username"]) for row in live}
        desired: set[Binding] = set()
        if app["enabled"]:
            for row in live:
                desired |= kafka_acls.app_bindings(row["username"], app["app_id"], app["acl"] or {})
        last = reconciles.get(cluster)
        in_force = {b for b in (Binding.from_json(x) for x in (last or {}).get("bindings") or [])
                    if b.principal in principals}
        out.append({
            "cluster": cluster,
            "principals": [{"principal": kafka_acls.principal(row["username"]), "generation": row["generation"],
                            "created_at": row["created_at"], "provisioned_at": row["provisioned_at"],
                            "retire_at": row["retire_at"]} for row in live],
            "desired": _show(desired), "in_force": _show(in_force),
            "missing": _show(desired - in_force), "extra": _show(in_force - desired),
            "reconciled_at": last["at"] if last else None, "ok": last["ok"] if last else None,
            "error": last["error"] if last else None,
        })
    return {"app_id": app["app_id"], "clusters": out}


def _show(bindings: set[Binding]) -> list[str]:
    return sorted(b.show() for b in bindings)
