"""Topic placements: which cluster holds each topic, so users name topics and the platform picks the cluster.

A platform past a million topics spreads them over many small clusters (docs/architecture.md, "Routing"). A
million namespaces in the config center is not an option, so the placement of a topic is a row here, read
one at a time by primary key when a client first sends to (or reads from) a topic it has not seen; the
table is never held in memory. ``route.cluster`` at topic scope still wins over a placement: that is how a
placed topic is moved live.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from cachetools import TTLCache
from sqlalchemy import Connection, Engine, delete, func, select

from ykafka import acl as acl_patterns

from ..storage import db, hotpath
from ..storage.models import clusters, topic_placements

#: most placements written by one bulk call (one transaction)
MAX_BULK = 10_000


class PlacementRejected(ValueError):
    """A placement names an illegal topic or an unregistered cluster; ``errors`` maps topic -> reason."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__(f"{len(errors)} placement(s) rejected")


def lookup(conn: Connection, topic: str) -> str | None:
    return conn.execute(select(topic_placements.c.cluster).where(topic_placements.c.topic == topic)).scalar()


def for_client(engine: Engine, app_id: str, topic: str) -> tuple[dict[str, list[str]], str | None]:
    """The app's ACL ({} when unknown or disabled) and the topic's placement: one statement on the pooled
    driver connection (the SDK's lookup path; see metaserver/storage/hotpath.py for why not Core)."""
    raw = engine.raw_connection()
    try:
        found = hotpath.rows(raw.cursor(), engine.dialect.name, hotpath.PLACEMENT, {"app_id": app_id, "topic": topic})
        raw.commit()
    finally:
        raw.close()
    if not found:
        return {}, None
    return dict(hotpath.json_value(found[0][0]) or {}), found[0][1]


def lookup_on(engine: Engine, topic: str) -> str | None:
    with db.read(engine) as conn:
        return lookup(conn, topic)


_ANY: TTLCache[int, bool] = TTLCache(maxsize=16, ttl=5.0)


def any_placed(engine: Engine) -> bool:
    """Whether clients should ask at all (a deployment without placements saves them a round trip); read at
    most every 5 s per process, so a grant costs no extra query."""
    known = _ANY.get(id(engine))
    if known is None:
        with db.read(engine) as conn:
            known = conn.execute(select(topic_placements.c.topic).limit(1)).first() is not None
        _ANY[id(engine)] = known
    return known


def check(conn: Connection, wanted: Mapping[str, str]) -> None:
    registered = set(conn.execute(select(clusters.c.name)).scalars())
    errors: dict[str, str] = {}
    for topic, cluster in wanted.items():
        problem = acl_patterns.name_problem(topic)
        if problem is not None:
            errors[topic[:255]] = f"topic name: {problem}"
        elif cluster not in registered:
            errors[topic] = f"unknown cluster {cluster[:200]!r}; registered: {', '.join(sorted(registered))}"
    if errors:
        raise PlacementRejected(errors)


def put(conn: Connection, wanted: Mapping[str, str], who: str) -> int:
    """Place (or re-place) topics; validated first, all or nothing."""
    check(conn, wanted)
    _ANY.clear()  # this process answers "placements: true" at once; peers within 5 s
    now = time.time()
    rows = [{"topic": topic, "cluster": cluster, "updated_at": now, "updated_by": who[:64]}
            for topic, cluster in wanted.items()]
    if rows:  # one multi-row statement (SQLAlchemy batches it), not one round trip per topic
        db.upsert_many(conn, topic_placements, rows, ["topic"], ["cluster", "updated_at", "updated_by"])
    return len(rows)


def remove(conn: Connection, topic: str) -> bool:
    return bool(conn.execute(delete(topic_placements).where(topic_placements.c.topic == topic)).rowcount)


def page(conn: Connection, prefix: str = "", cluster: str | None = None, after: str = "",
         limit: int = 100) -> list[dict[str, object]]:
    """Placements in topic order, one page (keyset paging by topic: no offset scans over millions of rows)."""
    query = select(topic_placements).where(topic_placements.c.topic > after)
    if prefix:
        query = query.where(topic_placements.c.topic >= prefix, topic_placements.c.topic < prefix + "\U0010ffff")
    if cluster:
        query = query.where(topic_placements.c.cluster == cluster)
    rows = conn.execute(query.order_by(topic_placements.c.topic).limit(limit)).mappings()
    return [dict(row) for row in rows]


def counts(conn: Connection) -> dict[str, int]:
    """Topics per cluster (the least-loaded cluster is where a new topic goes)."""
    rows = conn.execute(select(topic_placements.c.cluster, func.count()).group_by(topic_placements.c.cluster))
    return {str(name): int(count) for name, count in rows}
