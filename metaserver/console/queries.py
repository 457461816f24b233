"""The console's reads of the client table: filters pushed into SQL and only the columns a page shows, so a
page stays fast with tens of thousands of reports (bench/console_pages.py measures it).

Topic membership is a ``LIKE`` on the JSON text of ``topics`` (quoted name), then checked exactly in Python;
that works the same on SQLite and PostgreSQL without a JSON index.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, String, Text, cast, func, or_, select

from metaserver.models import client_state as cs

LIST_COLUMNS = (cs.c.app_id, cs.c.client_id, cs.c.ip, cs.c.hostname, cs.c.role, cs.c.cluster, cs.c.topics,
                cs.c.group_id, cs.c.ykafka_version, cs.c.librdkafka_version, cs.c.state, cs.c.last_seen)


def _like(value: str) -> str:
    return "%" + value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _topic_filter(topic: str) -> Any:
    return cast(cs.c.topics, Text).like(_like(f'"{topic}"'), escape="\\")


def online_after(heartbeat_s: int) -> float:
    return time.time() - 3 * heartbeat_s


def client_list(conn: Connection, heartbeat_s: int, f: dict[str, str], online_only: bool,
                limit: int) -> tuple[list[dict[str, Any]], int]:
    """(rows shown, total matching) for the clients page."""
    after = online_after(heartbeat_s)
    conds: list[Any] = []
    for name, column in (("app", cs.c.app_id), ("cluster", cs.c.cluster), ("group", cs.c.group_id),
                         ("role", cs.c.role)):
        if f.get(name):
            conds.append(column == f[name])
    if f.get("topic"):
        conds.append(_topic_filter(f["topic"]))
    if f.get("ip"):
        conds.append(or_(cs.c.ip.like(_like(f["ip"]), escape="\\"), cs.c.hostname.like(_like(f["ip"]), escape="\\")))
    if f.get("version"):
        conds.append(or_(cs.c.ykafka_version.like(_like(f["version"]), escape="\\"),
                         cs.c.librdkafka_version.like(_like(f["version"]), escape="\\")))
    if online_only:
        conds.append(cs.c.last_seen >= after)
    total = conn.execute(select(func.count()).select_from(cs).where(*conds)).scalar_one()
    stmt = select(*LIST_COLUMNS).where(*conds).order_by(cs.c.last_seen.desc()).limit(limit)
    rows = []
    for row in conn.execute(stmt).mappings():
        item = dict(row)
        if f.get("topic") and f["topic"] not in (item["topics"] or []):
            continue
        item["group"] = item.pop("group_id")
        item["online"] = item["last_seen"] >= after
        rows.append(item)
    return rows, int(total)


def live_roles(conn: Connection, heartbeat_s: int) -> list[tuple[str, int]]:
    stmt = (select(func.coalesce(cs.c.role, cast("?", String)), func.count()).where(cs.c.last_seen >= online_after(
        heartbeat_s)).group_by(cs.c.role))
    return sorted((str(role), int(n)) for role, n in conn.execute(stmt))


def reached(conn: Connection, heartbeat_s: int, kind: str, name: str, namespace: str) -> list[dict[str, Any]]:
    """Live clients reading a scope (kind global / cluster / group / topic) with the release key each holds
    for ``namespace`` (``held``) and whether it reports errors; the JSON is picked apart in SQL so ten
    thousand clients do not mean thirty thousand JSON decodes here."""
    columns = [cs.c.app_id, cs.c.client_id, cs.c.ip, cs.c.hostname, cs.c.role,
               cs.c.config_release_keys[namespace].as_string().label("held"),
               cast(cs.c.errors, Text).label("errors_text")]
    stmt = select(*columns).where(cs.c.last_seen >= online_after(heartbeat_s))
    if kind == "cluster":
        stmt = stmt.where(cs.c.cluster == name)
    elif kind == "group":
        stmt = stmt.where(cs.c.group_id == name)
    elif kind == "topic":
        stmt = stmt.add_columns(cs.c.topics).where(_topic_filter(name))
    out = []
    for row in conn.execute(stmt.order_by(cs.c.app_id, cs.c.client_id)).mappings():
        item = dict(row)
        if kind == "topic" and name not in (item["topics"] or []):
            continue
        errors_text = item.pop("errors_text")
        item["has_errors"] = bool(errors_text) and errors_text not in ("[]", "null")
        item["online"] = True
        out.append(item)
    return out


def rejections(conn: Connection, app_id: str, client_id: str) -> list[dict[str, Any]]:
    """The structured rejections of one client (from ``extra``), read only for clients that have errors."""
    extra = conn.execute(select(cs.c.extra).where(cs.c.app_id == app_id, cs.c.client_id == client_id)).scalar()
    return [e for e in ((extra or {}).get("errors") or [])
            if isinstance(e, dict) and e.get("type") == "config_rejected"]
