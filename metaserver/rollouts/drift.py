"""Drift: clients whose librdkafka settings in force differ from what the hot config asks for (each ykafka
producer reports ``extra.drift`` per topic and ``extra.drift_count``; ykafka/producer.py ``_drift``)."""

from __future__ import annotations

from sqlalchemy import Connection, func, select

from ..console.queries import live
from ..storage.models import client_state as cs


def drift_count(conn: Connection, heartbeat_s: int) -> int:
    """Live clients reporting at least one setting in force that differs from the intended one."""
    return int(conn.execute(select(func.count()).select_from(cs).where(
        live(heartbeat_s), cs.c.extra["drift_count"].as_integer() > 0)).scalar_one())
