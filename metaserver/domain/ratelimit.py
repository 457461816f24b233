"""Failed-authentication counters per (app, source IP) and per source IP, kept in the database (fixed windows).

Every peer sees the same counters, so an attacker gains nothing by spreading attempts over peers. An app's
counter is kept per source: whoever guesses at an app's secret throttles themselves, never the real app
calling from its own hosts (docs/metaserver.md, "Threat model").
"""

from __future__ import annotations

import random

from sqlalchemy import Connection, Engine, and_, delete, or_, select

from ..storage import db
from ..storage.models import auth_failures


def _window(now: float, window_s: int) -> int:
    return int(now // window_s) * window_s


def app_subject(app_id: str, ip: str | None) -> str:
    """The counter of one app's failures from one source."""
    return f"{app_id}@{ip or '-'}"[:255]


def blocked(conn: Connection, app_id: str | None, ip: str | None, now: float, limit: int, window_s: int) -> bool:
    subjects = [and_(auth_failures.c.scope == "ip", auth_failures.c.subject == ip)] if ip else []
    if app_id:
        subjects.append(and_(auth_failures.c.scope == "app", auth_failures.c.subject == app_subject(app_id, ip)))
    if not subjects:
        return False
    stmt = select(auth_failures.c.count).where(
        auth_failures.c.window_start == _window(now, window_s), or_(*subjects))
    return any(count >= limit for count in conn.execute(stmt).scalars())


def record_failure(engine: Engine, app_id: str | None, ip: str | None, now: float, window_s: int) -> None:
    start = _window(now, window_s)
    with db.write(engine) as conn:
        for scope, subject in (("app", app_subject(app_id, ip) if app_id else None), ("ip", ip)):
            if not subject:
                continue
            db.upsert(conn, auth_failures,
                      {"scope": scope, "subject": subject[:255], "window_start": start, "count": 1},
                      ["scope", "subject", "window_start"], update={"count": auth_failures.c.count + 1})
        if random.random() < 0.05:
            conn.execute(delete(auth_failures).where(auth_failures.c.window_start < start - window_s))
