"""The security switches (``auth.enabled``), kept in the MetaServer's own database.

Issue 37: the switch used to be a hot-config key in the config center's ``ykafka.global`` namespace, so the config
service's Open API token (a guessable default on the local stack) could release ``auth.enabled=false`` and then an
unsigned grant returned any app's broker password. Now the value lives in ``ms_security_switches``, changed only
through the admin API (``PUT /v1/admin/security``, audited in the same transaction), and the config center is never
read for it (the config service refuses to store it in a ``ykafka.*`` namespace anyway). Every MetaServer sharing
the database sees a change within ``ttl_s`` seconds (default 2): a request reads the cached value and at most one
request per ``ttl_s`` re-reads the row, so a grant never waits on more than one primary-key read.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import structlog
from sqlalchemy import Engine, select

from ykafka import catalog

from ..storage import db
from ..storage.models import security_switches
from . import audit

log = structlog.get_logger("metaserver.domain.authswitch")
KEY = "auth.enabled"


def read_all(engine: Engine) -> dict[str, Any]:
    """Every security switch's value (the catalog default where no row was ever written)."""
    with db.read(engine) as conn:
        rows = {row.name: row.value for row in conn.execute(select(security_switches))}
    return {name: rows.get(name, catalog.KEYS[name].default) for name in sorted(catalog.LOCKED)}


def write(engine: Engine, operator: str, values: dict[str, Any]) -> dict[str, Any]:
    """Set switches (already typed); the audit row commits with the change. Returns the switches after."""
    before = read_all(engine)
    with db.write(engine) as conn:
        for name, value in values.items():
            db.upsert(conn, security_switches, {"name": name, "value": value, "updated_by": operator[:255],
                                                "updated_at": time.time()}, ["name"])
        after = {**before, **values}
        audit.record(conn, operator, "security.set", "security", before, after)
    log.warning("security switches changed", operator=operator, before=before, after=after)
    return after


class AuthSwitch:
    """``auth.enabled`` as this MetaServer sees it: the database row, re-read at most every ``ttl_s`` seconds."""

    def __init__(self, engine: Engine, ttl_s: float = 2.0) -> None:
        self._engine = engine
        self._ttl = ttl_s
        self._value: bool = bool(catalog.KEYS[KEY].default)
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    def enabled(self) -> bool:
        now = time.monotonic()
        if now - self._read_at >= self._ttl and self._lock.acquire(blocking=False):
            try:
                self.refresh()
            finally:
                self._lock.release()
        return self._value

    def refresh(self) -> bool:
        """Re-read the row now (after an admin change on this instance, or on the ttl)."""
        try:
            value = bool(read_all(self._engine)[KEY])
        except Exception as exc:  # noqa: BLE001 - a database hiccup keeps the last value, it never opens the door
            log.warning("security switches unreadable; keeping the last value", error=str(exc), enabled=self._value)
            return self._value
        self._read_at = time.monotonic()
        if value != self._value:
            log.warning("auth switch changed", enabled=value)
            self._value = value
        return self._value
