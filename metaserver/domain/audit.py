"""The audit trail: who changed what, when, with the state before and after (secrets never recorded)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, select

from ..storage.models import audit


def record(conn: Connection, operator: str, action: str, target: str, before: Any, after: Any) -> None:
    """Write one audit row inside the caller's transaction, so the change and its record commit together."""
    conn.execute(audit.insert().values(at=time.time(), operator=operator[:255], action=action,
                                       target=target[:512], before=before, after=after))


def query(conn: Connection, operator: str | None = None, action: str | None = None, target: str | None = None,
          since: float | None = None, limit: int = 100) -> list[dict[str, Any]]:
    stmt = select(audit).order_by(audit.c.id.desc()).limit(limit)
    if operator:
        stmt = stmt.where(audit.c.operator == operator)
    if action:
        stmt = stmt.where(audit.c.action.startswith(action, autoescape=True))
    if target:
        stmt = stmt.where(audit.c.target == target)
    if since is not None:
        stmt = stmt.where(audit.c.at >= since)
    return [dict(row) for row in conn.execute(stmt).mappings()]
