"""Release markers: what changed, when — releases, gray releases, rollbacks, rollout steps and failovers — read
from the audit log, for the vertical lines the console draws on every chart, so a change in a curve can be
read against the change that caused it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from ykafka.catalog import GLOBAL, Scope

from ..console.loop import gray_match
from ..storage.models import audit

#: audit actions that change what clients run, and the kind of marker each draws
KINDS = {"config.set": "release", "config.gray": "gray", "config.rollback": "rollback",
         "config.gray_merge": "release", "config.gray_abandon": "rollback", "cluster.failover": "failover",
         "config.rollout.publish": "rollout", "config.rollout.advance": "rollout",
         "config.rollout.promote": "rollout", "config.rollout.rollback": "rollback",
         "config.rollout.abort": "rollback"}
LIMIT = 200
#: a client's page draws the markers of at most this many namespaces (its topics beyond are left out)
CLIENT_NAMESPACES = 100


def client_namespaces(client: dict[str, Any]) -> list[str]:
    """The namespaces whose changes reach a client: the global one, its cluster's, its group's and its topics'
    (as it reports them), and any other ykafka namespace it reports holding a release of."""
    scopes = [f"cluster:{client.get('cluster')}" if client.get("cluster") else "",
              f"group:{client.get('group')}" if client.get("group") else "",
              *(f"topic:{t}" for t in client.get("topics") or [])]
    out = [GLOBAL.namespace()]
    for text in filter(None, scopes):
        try:
            out.append(Scope.parse(text).namespace())
        except ValueError:  # a name no scope can hold has no namespace, hence no markers
            continue
    out += [ns for ns in (client.get("config_release_keys") or {}) if Scope.from_namespace(str(ns)) is not None]
    return list(dict.fromkeys(out))[:CLIENT_NAMESPACES]


def markers(conn: Connection, since: float, namespaces: list[str] | None = None,
            reaching: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Markers since ``since`` (epoch s) on the given namespaces (None: all), oldest first: ``at`` (epoch ms),
    ``kind`` (release, gray, rollback, rollout, failover), ``label`` and ``target``. With ``reaching`` (a client's
    state), a gray release (an operator's, or a rollout step's canary) is a marker only if it reached that client."""
    stmt = (select(audit.c.at, audit.c.action, audit.c.target, audit.c.after)
            .where(audit.c.at >= since, audit.c.action.in_(list(KINDS)))
            .order_by(audit.c.at.desc(), audit.c.id.desc()).limit(LIMIT))
    if namespaces is not None:
        stmt = stmt.where(audit.c.target.in_(namespaces))
    out = []
    for row in conn.execute(stmt).mappings():
        after = row["after"] if isinstance(row["after"], dict) else {}
        raw = after.get("values")
        values: dict[str, Any] = raw if isinstance(raw, dict) else {}
        kind = "failover" if "route.active" in values else KINDS[row["action"]]
        if kind == "gray" and reaching is not None and not gray_match(reaching, after.get("ips"), after.get("labels")):
            continue
        what = ", ".join(f"{k}={v}" for k, v in list(values.items())[:2]) if values else ""
        if row["action"].startswith("config.rollout."):
            percent = after.get("percent")
            what = f"{row['action'].rsplit('.', 1)[1]}{f' {percent:g} %' if isinstance(percent, int | float) else ''}"
        label = f"{kind}: {what}" if what else kind
        out.append({"at": int(row["at"] * 1000), "kind": kind, "label": label[:60], "target": row["target"]})
    return out[::-1]  # oldest first; changes within one millisecond in the order they were made
