"""The running config center: store + read model + long-poll registry, and the write path joining them.

Writes are serialized (one at a time, off the event loop) so snapshots and notification ids are applied
in commit order; each committed change is swapped into the read model before its long polls are woken.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import structlog
from starlette.concurrency import run_in_threadpool

from metaserver.configcenter.instances import InstanceRecorder
from metaserver.configcenter.longpoll import LongPollRegistry
from metaserver.configcenter.readmodel import ReadModel
from metaserver.configcenter.store import Change, Store

log = structlog.get_logger(__name__)

CREDENTIAL_REFRESH_S = 1.0


class ConfigCenter:
    """Owns the store, the read model and the long polls of one service process."""

    def __init__(self, db_path: str, longpoll_timeout: float = 60.0) -> None:
        self.store = Store(db_path)
        self.model = ReadModel()
        self.registry = LongPollRegistry()
        self.longpoll_timeout = longpoll_timeout
        self.instances = InstanceRecorder(self.store)
        self.closing = False  # shutting down: parked polls were answered, new ones are refused (503)
        self._write_lock = asyncio.Lock()
        self._refresher: asyncio.Task[None] | None = None

    async def start(self, openapi_token: str | None = None) -> None:
        if openapi_token:
            await run_in_threadpool(self.store.create_token, openapi_token, "seeded", True)
        states, app_namespaces = await run_in_threadpool(self.store.load_all)
        for (app_id, ns), state in states.items():
            self.model.set_namespace(app_id, ns, state)
        self.model.set_app_namespaces(app_namespaces)
        self.model.set_credentials(await run_in_threadpool(self.store.load_credentials))
        self._refresher = asyncio.create_task(self._refresh_credentials())
        self.instances.start()
        log.info("configcenter.started", db=self.store.db_path, namespaces=len(states),
                 longpoll_timeout=self.longpoll_timeout)

    def begin_shutdown(self) -> int:
        """Answer every parked poll with 304 now and refuse new ones, so clients move on at once instead of
        holding connections the server would cut (with a 500) at its graceful-shutdown timeout."""
        self.closing = True
        return self.registry.expire_all()

    async def stop(self) -> None:
        await self.instances.stop()
        self.begin_shutdown()
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        self.store.close()

    async def _refresh_credentials(self) -> None:
        """Pick up tokens and access keys added by the CLI while we run (Apollo rescans its cache too)."""
        while True:
            await asyncio.sleep(CREDENTIAL_REFRESH_S)
            try:
                self.model.set_credentials(await run_in_threadpool(self.store.load_credentials))
            except Exception:  # a locked or briefly unavailable DB must not kill the refresher
                log.warning("configcenter.credential_refresh_failed", exc_info=True)

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
                self.registry.publish(message, notification_id)
            return change.result
