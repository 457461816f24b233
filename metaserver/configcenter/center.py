"""The running config center: store + read model + long-poll registry, and the write path joining them.

Writes are serialized (one at a time, off the event loop) so snapshots and notification ids are applied
in commit order; each committed change is swapped into the read model before its long polls are woken.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

import structlog
from starlette.concurrency import run_in_threadpool

from .instances import InstanceRecorder
from .longpoll import DEFAULT_POLL_RETRY_AFTER_S, LongPollRegistry, default_max_parked
from .notify import ReleaseListener
from .readmodel import ReadModel
from .store import Change, Store

log = structlog.get_logger(__name__)

CREDENTIAL_REFRESH_S = 1.0
HEARTBEAT_S = 2.0  # discovery: each process upserts its row this often ...
INSTANCE_TTL_S = 6.0  # ... and is listed while its last heartbeat is younger than this (stopped: gone ≤ 6 s)
RELEASE_SCAN_S = 0.5  # several instances on one database: another's release reaches our polls within this
REFUSAL_LOG_S = 10.0  # refused long polls are logged as one line per this many seconds, not one per poll


class ConfigCenter:
    """Owns the store, the read model and the long polls of one service process."""

    def __init__(self, db_path: str, longpoll_timeout: float = 60.0, advertise_url: str | None = None,
                 scan_interval: float = RELEASE_SCAN_S, notify: bool = True, max_parked: int = 0,
                 poll_retry_after: int = DEFAULT_POLL_RETRY_AFTER_S) -> None:
        self.store = Store(db_path)
        #: every config-service read must be signed, even of an app without keys (the secured stack, issue 37)
        self.require_access_key = False
        # parked polls beyond this are refused (503) so the process never reaches its open-file limit
        self.max_parked = max_parked if max_parked > 0 else default_max_parked()
        self.poll_retry_after = poll_retry_after  # seconds, the Retry-After of a refused poll
        self.refused = 0  # long polls refused since start because max_parked were parked
        self._refused_logged = 0
        self._refusal_logged_at = 0.0
        self.scan_interval = scan_interval
        self.notify = notify and self.store.dialect == "postgresql"
        self.scans = 0  # release-message scans run (each one query)
        self.advertise_url = advertise_url.rstrip("/") + "/" if advertise_url else None
        self.instance_id = f"{uuid.uuid4().hex[:12]}"
        self.model = ReadModel()
        self.registry = LongPollRegistry()
        self.longpoll_timeout = longpoll_timeout
        self.instances = InstanceRecorder(self.store)
        self.closing = False  # shutting down: parked polls were answered, new ones are refused (503)
        self._write_lock = asyncio.Lock()
        self._refresher: asyncio.Task[None] | None = None
        self._scanner: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._known: dict[str, int] = {}  # release-message key -> latest id this process has published
        self._wake = asyncio.Event()  # set by the PostgreSQL listener: scan now
        self._listener: ReleaseListener | None = None

    async def start(self, openapi_token: str | None = None) -> None:
        if openapi_token:
            await run_in_threadpool(self.store.create_token, openapi_token, "seeded", True)
        states, app_namespaces = await run_in_threadpool(self.store.load_all)
        for (app_id, ns), state in states.items():
            self.model.set_namespace(app_id, ns, state)
        self.model.set_app_namespaces(app_namespaces)
        self.model.set_credentials(await run_in_threadpool(self.store.load_credentials))
        self._known = await run_in_threadpool(self.store.latest_messages)
        self._refresher = asyncio.create_task(self._refresh_credentials())
        self._scanner = asyncio.create_task(self._scan_releases())
        if self.notify:
            self._listener = ReleaseListener(self.store.engine.url, asyncio.get_running_loop(), self._wake)
            self._listener.start()
        if self.advertise_url:
            await run_in_threadpool(self.store.heartbeat, self.instance_id, self.advertise_url)
            self._heartbeat = asyncio.create_task(self._beat())
        self.instances.start()
        log.info("configcenter.started", db=self.store.engine.url.render_as_string(), namespaces=len(states),
                 longpoll_timeout=self.longpoll_timeout, max_parked=self.max_parked)

    def refuse_poll(self) -> None:
        """Count a long poll refused at the cap; log the first at once, then one line per
        :data:`REFUSAL_LOG_S` with the count since the last (a fleet re-polling must not flood the log)."""
        self.refused += 1
        now = time.monotonic()
        if self._refused_logged == 0 or now - self._refusal_logged_at >= REFUSAL_LOG_S:
            log.warning("configcenter.longpolls_refused", refused=self.refused - self._refused_logged,
                        refused_total=self.refused, parked=len(self.registry), max_parked=self.max_parked)
            self._refused_logged = self.refused
            self._refusal_logged_at = now

    @property
    def notifies_received(self) -> int:
        return self._listener.received if self._listener is not None else 0

    def begin_shutdown(self) -> int:
        """Answer every parked poll with 304 now and refuse new ones, so clients move on at once instead of
        holding connections the server would cut (with a 500) at its graceful-shutdown timeout."""
        self.closing = True
        return self.registry.expire_all()

    async def stop(self) -> None:
        await self.instances.stop()
        if self._listener is not None:
            await run_in_threadpool(self._listener.stop)
        self.begin_shutdown()
        for task in (self._refresher, self._scanner, self._heartbeat):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.advertise_url:
            with contextlib.suppress(Exception):  # a dead database: the row ages out instead
                await run_in_threadpool(self.store.forget_instance, self.instance_id)
        self.store.close()

    async def _refresh_credentials(self) -> None:
        """Pick up tokens and access keys added by the CLI while we run (Apollo rescans its cache too)."""
        while True:
            await asyncio.sleep(CREDENTIAL_REFRESH_S)
            try:
                self.model.set_credentials(await run_in_threadpool(self.store.load_credentials))
            except Exception:  # a locked or briefly unavailable DB must not kill the refresher
                log.warning("configcenter.credential_refresh_failed", exc_info=True)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await run_in_threadpool(self.store.heartbeat, self.instance_id, self.advertise_url or "")
            except Exception:
                log.warning("configcenter.heartbeat_failed", exc_info=True)

    async def live_instances(self) -> list[tuple[str, str]]:
        """Every config-service process on this database that heartbeated lately (discovery)."""
        return await run_in_threadpool(self.store.live_instances, INSTANCE_TTL_S)

    async def _scan_releases(self) -> None:
        """Apollo's ReleaseMessageScanner: pick up releases committed by other instances on the same database,
        reload those namespaces into the read model and wake the polls parked here. The table keeps one row
        (the latest id) per key, so comparing every key's id misses nothing, even when ids commit out of order.
        Runs every ``scan_interval`` seconds, and at once when PostgreSQL NOTIFY says another instance released."""
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.scan_interval)
            self._wake.clear()
            try:
                await self.scan_once()
            except Exception:  # a locked or briefly unavailable DB must not kill the scanner
                log.warning("configcenter.release_scan_failed", exc_info=True)

    async def scan_once(self) -> int:
        """One scan: returns how many release-message keys moved since the last one."""
        self.scans += 1
        latest = await run_in_threadpool(self.store.latest_messages)
        moved = [msg for msg, i in latest.items() if i > self._known.get(msg, -1)]
        if not moved:
            return 0
        async with self._write_lock:  # ordered with this process's own writes
            states, app_namespaces = await run_in_threadpool(self.store.load_changed, moved)
            for (app_id, ns), state in states.items():
                self.model.set_namespace(app_id, ns, state)
            self.model.set_app_namespaces(app_namespaces)
            for msg in moved:
                if latest[msg] > self._known.get(msg, -1):
                    self._known[msg] = latest[msg]
                    self.registry.publish(msg, latest[msg])
        return len(moved)

    async def write(self, fn: Callable[..., Change], *args: Any, **kwargs: Any) -> Any:
        """Run a store write, swap its snapshots in, then wake the long polls; returns its result."""
        async with self._write_lock:
            change: Change = await run_in_threadpool(fn, *args, **kwargs)
            for (app_id, ns), state in change.states.items():
                self.model.set_namespace(app_id, ns, state)
            if change.app_namespace_views is not None:
                self.model.set_app_namespaces(change.app_namespace_views)
            if change.credentials is not None:
                self.model.set_credentials(change.credentials)
            for message, notification_id in change.messages:
                self._known[message] = max(notification_id, self._known.get(message, -1))
                self.registry.publish(message, notification_id)
            return change.result
