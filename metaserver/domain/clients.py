"""Client reports: the real-time view (one row per client, last seen) and the history of what changed.

A client is online while it has reported within three heartbeats (the heartbeat is the renew interval).

The history gets a row when a client first reports and whenever its report differs from the one before, not
at every heartbeat: 100,000 clients reporting every 30 s would otherwise add 288 million rows a day, all
saying "still the same" (``last_seen`` in the real-time view already says that). :func:`prune` bounds both
tables by age (bench/control_plane_scale.py measures their size after a simulated week).
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import Connection, Engine, Table, delete, select, tuple_

from ..schemas import ClientReport
from ..storage import db, hotpath
from ..storage.models import CLIENT_FIELDS, client_release_keys, client_reports, client_state


def _columns(report: ClientReport) -> dict[str, Any]:
    return {
        "ip": report.ip, "hostname": report.hostname, "pid": report.pid,
        "process_started": report.process_started, "language": report.language,
        "ykafka_version": report.versions.ykafka, "confluent_kafka_version": report.versions.confluent_kafka,
        "librdkafka_version": report.versions.librdkafka, "role": report.role, "topics": report.topics,
        "group_id": report.group, "cluster": report.cluster, "config_release_keys": report.config_release_keys,
        "state": report.state, "errors": report.errors, "extra": report.extra,
    }


#: where ``config_release_keys`` is in the hot path's columns (a report's previous keys)
_KEYS_AT = hotpath.CLIENT_COLUMNS.index("config_release_keys")
#: the longest namespace and key part kept in ``ms_client_release_keys`` (its columns); a longer one (no config
#: service makes one) is left out, so that client shows as pending on a panel
KEY_MAX = 512


def release_key_rows(app_id: str, client_id: str, held: dict[str, str]) -> list[dict[str, str]]:
    """``ms_client_release_keys`` rows of one client: one per namespace and part of its key (the config service
    joins the keys of the releases it merged with ``+``; a client holds a release when its key is one part)."""
    return [{"app_id": app_id, "client_id": client_id, "namespace": namespace, "release_key": part}
            for namespace, key in sorted(held.items()) if len(namespace) <= KEY_MAX
            for part in sorted(set(str(key).split("+"))) if 0 < len(part) <= KEY_MAX]


def store(engine: Engine, report: ClientReport, now: float | None = None) -> bool:
    """Record a report in the real-time view; add it to the history only when it differs from the client's
    previous report (or is its first). Returns whether a history row was written. ``now``: the report's time
    (the simulated week of the benchmark moves it; servers leave it to the clock).

    Every client runs this at every heartbeat, so it is pre-written SQL on the pooled DBAPI connection
    (storage/hotpath.py): built as Core statements, the 20-column upsert and insert cost ~5 ms of CPU per
    report in SQLAlchemy's statement building and caching, which at 100,000 clients (3,333 reports/s) is
    more cores than the database's own work."""
    now = time.time() if now is None else now
    values = _columns(report)
    params = {"app_id": report.app_id, "client_id": report.client_id, "now": now,
              **{k: json.dumps(v) if k in hotpath.CLIENT_JSON else v for k, v in values.items()}}
    dialect = engine.dialect.name
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        if dialect == "sqlite":
            cur.execute("BEGIN IMMEDIATE")  # as db.write: the write lock up front (storage/db.py)
        before = hotpath.rows(cur, dialect, hotpath.CLIENT_BEFORE, params)
        hotpath.rows(cur, dialect, hotpath.CLIENT_UPSERT, params)
        changed = not before or {k: hotpath.json_value(v) if k in hotpath.CLIENT_JSON else v
                                 for k, v in zip(hotpath.CLIENT_COLUMNS, before[0], strict=True)} != values
        if changed:
            hotpath.rows(cur, dialect, hotpath.CLIENT_HISTORY, params)
        held_before = hotpath.json_value(before[0][_KEYS_AT]) if before else None
        if held_before != values["config_release_keys"]:
            hotpath.rows(cur, dialect, hotpath.RELEASE_KEYS_DELETE, params)
            hotpath.many(cur, dialect, hotpath.RELEASE_KEYS_INSERT, release_key_rows(
                report.app_id, report.client_id, report.config_release_keys))
        raw.commit()
    finally:
        raw.close()  # back to the pool (rolled back if anything is left open)
    return changed


#: rows one prune statement deletes at most: each transaction stays short, so reports are never held up long
PRUNE_BATCH = 5000


def prune(engine: Engine, now: float, state_retention_s: float, history_retention_s: float,
          batch: int = PRUNE_BATCH) -> dict[str, int]:
    """Delete clients not seen for ``state_retention_s`` and history rows older than ``history_retention_s``,
    ``batch`` rows per transaction (index range scans on ``last_seen`` and ``at``). Idempotent: every
    MetaServer may run it; returns the rows deleted per table."""
    removed = {"clients": 0, "history": 0}
    for name, table, column, cutoff in (
            ("clients", client_state, client_state.c.last_seen, now - state_retention_s),
            ("history", client_reports, client_reports.c.at, now - history_retention_s)):
        key = tuple_(table.c.app_id, table.c.client_id) if table is client_state else table.c.id
        keys = [table.c.app_id, table.c.client_id] if table is client_state else [table.c.id]
        while True:
            with db.write(engine) as conn:
                doomed = select(*keys).where(column < cutoff).limit(batch)
                if table is client_state:  # the clients' held keys go with them: the same clients, read once
                    gone = [tuple(row) for row in conn.execute(doomed)]
                    if gone:
                        conn.execute(delete(client_release_keys).where(tuple_(
                            client_release_keys.c.app_id, client_release_keys.c.client_id).in_(gone)))
                        count = conn.execute(delete(table).where(key.in_(gone))).rowcount
                    else:
                        count = 0
                else:
                    count = conn.execute(delete(table).where(key.in_(doomed))).rowcount
            removed[name] += count
            if count < batch:
                break
    return removed


def _json(row: Any, online_after: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {"app_id": row["app_id"], "client_id": row["client_id"]}
    for name in CLIENT_FIELDS:
        out[name] = row[name]
    out["versions"] = {"ykafka": out.pop("ykafka_version"), "confluent_kafka": out.pop("confluent_kafka_version"),
                       "librdkafka": out.pop("librdkafka_version")}
    out["group"] = out.pop("group_id")
    if online_after is not None:
        out["first_seen"] = row["first_seen"]
        out["last_seen"] = row["last_seen"]
        out["online"] = row["last_seen"] >= online_after
    else:
        out["at"] = row["at"]
        out["id"] = row["id"]
    return out


def _filters(table: Table, stmt: Any, app: str | None, cluster: str | None, librdkafka: str | None,
             group: str | None) -> Any:
    if app:
        stmt = stmt.where(table.c.app_id == app)
    if cluster:
        stmt = stmt.where(table.c.cluster == cluster)
    if librdkafka:
        if librdkafka.endswith("*"):  # "1.*" finds every 1.x client
            stmt = stmt.where(table.c.librdkafka_version.startswith(librdkafka[:-1], autoescape=True))
        else:
            stmt = stmt.where(table.c.librdkafka_version == librdkafka)
    if group:
        stmt = stmt.where(table.c.group_id == group)
    return stmt


def current(conn: Connection, heartbeat_s: int, app: str | None = None, cluster: str | None = None,
            librdkafka: str | None = None, group: str | None = None, online: bool | None = None,
            limit: int = 1000, after: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    """Clients in key order (app id, client id), at most ``limit``, from just after the key ``after``: a
    caller pages through any inventory with the last row's key (the primary key's index; no OFFSET)."""
    online_after = time.time() - 3 * heartbeat_s
    stmt = _filters(client_state, select(client_state), app, cluster, librdkafka, group)
    if online is True:
        stmt = stmt.where(client_state.c.last_seen >= online_after)
    elif online is False:
        stmt = stmt.where(client_state.c.last_seen < online_after)
    if after is not None:
        stmt = stmt.where(client_state.c.app_id >= after[0],
                          tuple_(client_state.c.app_id, client_state.c.client_id) > tuple_(*after))
    stmt = stmt.order_by(client_state.c.app_id, client_state.c.client_id).limit(limit)
    return [_json(row, online_after) for row in conn.execute(stmt).mappings()]


def one(conn: Connection, heartbeat_s: int, app_id: str, client_id: str) -> dict[str, Any] | None:
    """One client's current state (as :func:`current` shapes it), read by its key; None when unknown."""
    row = conn.execute(select(client_state).where(client_state.c.app_id == app_id,
                                                  client_state.c.client_id == client_id)).mappings().first()
    return None if row is None else _json(row, time.time() - 3 * heartbeat_s)


def history(conn: Connection, app: str | None = None, cluster: str | None = None, librdkafka: str | None = None,
            group: str | None = None, client_id: str | None = None, since: float | None = None,
            limit: int = 1000, before: int | None = None) -> list[dict[str, Any]]:
    """History rows newest first, at most ``limit``, with ids below ``before`` (the last row's id pages on)."""
    stmt = _filters(client_reports, select(client_reports), app, cluster, librdkafka, group)
    if client_id:
        stmt = stmt.where(client_reports.c.client_id == client_id)
    if since is not None:
        stmt = stmt.where(client_reports.c.at >= since)
    if before is not None:
        stmt = stmt.where(client_reports.c.id < before)
    stmt = stmt.order_by(client_reports.c.id.desc()).limit(limit)
    return [_json(row, None) for row in conn.execute(stmt).mappings()]
