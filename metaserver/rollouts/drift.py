"""Drift: clients whose librdkafka settings in force differ from what the hot config asks for (each ykafka
producer reports ``extra.drift`` per topic and ``extra.drift_count``; ykafka/producer.py ``_drift``)."""

from __future__ import annotations

from sqlalchemy import Connection, func, select

from ..console import queries
from ..console.queries import live
from ..storage.models import client_state as cs


def drift_count(conn: Connection, heartbeat_s: int) -> int:
    """Live clients reporting at least one setting in force that differs from the intended one."""
    return int(conn.execute(select(func.count()).select_from(cs).where(
        live(heartbeat_s), cs.c.extra["drift_count"].as_integer() > 0)).scalar_one())


def drifting(conn: Connection, heartbeat_s: int, large: bool) -> int:
    """:func:`drift_count` as the overview shows it: a scan of every live client, so a summary reused while it
    is read again off the request path when slow and ``large`` (the fleet's live count says so;
    ``queries.reuse_when_slow``), read at start-up by the warmer (metaserver/console/warm.py)."""
    return queries.reuse_when_slow(conn, ("drift_count", heartbeat_s), queries.OVERVIEW_TTL_S,
                                   lambda c: drift_count(c, heartbeat_s), lambda _n: large)
