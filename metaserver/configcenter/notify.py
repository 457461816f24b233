"""PostgreSQL LISTEN/NOTIFY: a release committed by any config-service instance wakes every other's scanner now.

Each write that records a release message also runs ``pg_notify(CHANNEL, id)`` in its transaction, so the
notification is delivered when (and only if) the release commits. Every instance LISTENs on a dedicated
connection in a thread and, on a notification, wakes its release-message scanner at once instead of at the
next scan. The scan stays the source of truth (what changed, which ids), and keeps running every
``RELEASE_SCAN_S`` as the fallback for a lost notification or a broken listening connection (docs/deployment.md
gives the measured difference).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import structlog
from sqlalchemy import Connection, text
from sqlalchemy.engine import URL

log = structlog.get_logger(__name__)

#: one channel per database (PostgreSQL channels are database-wide, not per schema: instances of other
#: schemas on the same database only cause an extra, empty scan)
CHANNEL = "ykafka_cc_release"
RECONNECT_S = 1.0


def notify(conn: Connection, notification_id: int) -> None:
    """Queue the wake-up in the current transaction (delivered on commit, dropped on rollback)."""
    conn.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL, "payload": str(notification_id)})


class ReleaseListener:
    """A thread LISTENing on ``CHANNEL``; each notification sets ``wake`` on the event loop."""

    def __init__(self, url: URL, loop: asyncio.AbstractEventLoop, wake: asyncio.Event) -> None:
        self._conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._loop = loop
        self._wake = wake
        self._stopping = threading.Event()
        self._conn: Any = None
        self.received = 0
        self._thread = threading.Thread(target=self._run, name="cc-release-listener", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=3)

    def _run(self) -> None:
        import psycopg

        while not self._stopping.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    log.info("configcenter.listening", channel=CHANNEL)
                    self._loop.call_soon_threadsafe(self._wake.set)  # catch up on what passed while away
                    while not self._stopping.is_set():
                        for _ in conn.notifies(timeout=0.5, stop_after=1):
                            self.received += 1
                            self._loop.call_soon_threadsafe(self._wake.set)
            except Exception:  # the database went away: the scan covers the gap, we reconnect
                if self._stopping.is_set():
                    return
                log.warning("configcenter.listen_failed", exc_info=True)
                with contextlib.suppress(Exception):
                    self._stopping.wait(RECONNECT_S)
