"""A YAML document admins edit in the console (guard rules, alert notifications): read from a file under
``configs/`` until an admin saves it, then from one row of its own table (so every MetaServer peer serves the
same one); each save is checked by its caller first and audited in the same transaction as the write."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy import Engine, Table, select

from ..storage import db
from . import audit

log = structlog.get_logger("metaserver.domain.edited_docs")


@dataclass(frozen=True)
class Stored:
    """The document's text and where it comes from (``console`` with the edit's version, ``file``, ``none``)."""

    body: str
    source: str
    version: int
    updated_by: str | None = None
    updated_at: float | None = None


def current(engine: Engine, table: Table, seed: Callable[[], str], missing: str) -> Stored:
    """The saved document (row id 1), else ``seed()`` (the file's text; ``missing`` when it cannot be read)."""
    with db.read(engine) as conn:
        row = conn.execute(select(table).where(table.c.id == 1)).mappings().first()
    if row is not None:
        return Stored(row["body"], "console", int(row["version"]), row["updated_by"], float(row["updated_at"]))
    try:
        return Stored(seed(), "file", 0)
    except OSError as exc:
        log.warning("edited_doc.file_missing", table=table.name, error=str(exc))
        return Stored(missing, "none", 0)


def store(engine: Engine, table: Table, body: str, who: str, before: Stored, action: str, target: str,
          summary_before: Mapping[str, Any], summary_after: Mapping[str, Any]) -> None:
    """Write ``body`` as the next version and audit the edit (``summary_*``: one line per item, no secrets)."""
    with db.write(engine) as conn:
        version = before.version + 1
        values = {"body": body, "version": version, "updated_at": time.time(), "updated_by": who[:255]}
        if before.source == "console":
            conn.execute(table.update().where(table.c.id == 1).values(**values))
        else:
            conn.execute(table.insert().values(id=1, **values))
        audit.record(conn, who, action, target, {**summary_before, "version": before.version},
                     {**summary_after, "version": version})
