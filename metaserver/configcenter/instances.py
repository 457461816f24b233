"""Who holds which release: Apollo's Instance / InstanceConfig records, written in batches.

Every ``/configs`` answer records the client (app, cluster, data center, IP) and the release key of each
release it was served; every ``/notifications/v2`` poll marks the client's namespaces seen. Calls only touch
an in-memory map; a background task writes it in one transaction per interval, so a busy config service
does not wait on the database. As in Apollo, a record whose release is unchanged is rewritten at most once
per ``refresh_s`` (its last-seen time is that precise), and records not seen for ``retention`` are pruned.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import structlog
from sqlalchemy import CursorResult, delete, select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from metaserver.configcenter import models as m
from metaserver.configcenter.readmodel import ReleaseView
from metaserver.configcenter.store import Store

log = structlog.get_logger(__name__)

InstanceKey = tuple[str, str, str, str]  # app id, cluster, data center, ip
ConfigKey = tuple[str, str]  # config app id, namespace (lower-case: Apollo compares them case-insensitively)


@dataclass
class _Held:
    cluster: str
    release_key: str
    seen: datetime


class InstanceRecorder:
    """Collects client sightings in memory and writes them in batches (see module doc)."""

    def __init__(self, store: Store, flush_interval_s: float = 1.0, refresh_s: float = 60.0,
                 retention: timedelta = timedelta(days=1), prune_interval_s: float = 3600.0) -> None:
        self.store = store
        self.flush_interval_s = flush_interval_s
        self.refresh_s = refresh_s
        self.retention = retention
        self.prune_interval_s = prune_interval_s
        self._lock = threading.Lock()
        self._configs: dict[InstanceKey, dict[ConfigKey, _Held]] = {}
        self._polls: dict[InstanceKey, tuple[set[str], datetime]] = {}
        self._written: dict[tuple[InstanceKey, ConfigKey], tuple[str, float]] = {}  # key -> (release, at)
        self._polled_at: dict[InstanceKey, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._last_prune = 0.0

    # -- the request path: memory only ------------------------------------------------------------
    def served(self, app_id: str, cluster: str, data_center: str | None, ip: str | None,
               releases: Iterable[ReleaseView]) -> None:
        """A ``/configs`` answer: the client now holds ``releases`` (one per namespace layer)."""
        if not ip:
            return
        inst = (app_id, cluster, data_center or "", ip)
        now, mono = datetime.now(), time.monotonic()
        for rel in releases:
            key = (rel.app_id.lower(), rel.namespace_name.lower())
            written = self._written.get((inst, key))
            if written is not None and written[0] == rel.release_key and mono - written[1] < self.refresh_s:
                continue
            with self._lock:
                self._configs.setdefault(inst, {})[key] = _Held(rel.cluster_name, rel.release_key, now)

    def polled(self, app_id: str, cluster: str, data_center: str | None, ip: str | None,
               namespaces: Iterable[str]) -> None:
        """A ``/notifications/v2`` poll: the client is alive and watches ``namespaces``."""
        if not ip:
            return
        inst = (app_id, cluster, data_center or "", ip)
        mono = time.monotonic()
        if mono - self._polled_at.get(inst, -self.refresh_s) < self.refresh_s:
            return
        self._polled_at[inst] = mono
        with self._lock:
            names, _ = self._polls.get(inst, (set(), datetime.now()))
            names.update(n.lower() for n in namespaces)
            self._polls[inst] = (names, datetime.now())

    # -- the writer ---------------------------------------------------------------------------------
    def flush(self) -> int:
        """Write what was collected since the last flush in one transaction; returns rows written."""
        with self._lock:
            configs, self._configs = self._configs, {}
            polls, self._polls = self._polls, {}
        if not configs and not polls:
            return 0
        written = self.store.read(lambda s: self._write(s, configs, polls))
        mono = time.monotonic()
        for inst, held in configs.items():
            for key, h in held.items():
                self._written[(inst, key)] = (h.release_key, mono)
        return written

    def _write(self, s: Session, configs: dict[InstanceKey, dict[ConfigKey, _Held]],
               polls: dict[InstanceKey, tuple[set[str], datetime]]) -> int:
        rows = 0
        for inst in set(configs) | set(polls):
            seen_at = [h.seen for h in configs.get(inst, {}).values()]
            if inst in polls:
                seen_at.append(polls[inst][1])
            seen = max(seen_at)
            instance = self._instance(s, inst, seen)
            existing = {(c.config_app_id.lower(), c.config_namespace_name.lower()): c
                        for c in s.scalars(select(m.InstanceConfig).where(m.InstanceConfig.instance_id == instance.id))}
            for key, h in configs.get(inst, {}).items():
                row = existing.get(key)
                if row is None:
                    s.add(m.InstanceConfig(instance_id=instance.id, config_app_id=key[0], config_cluster_name=h.cluster,
                                           config_namespace_name=key[1], release_key=h.release_key,
                                           release_delivered_at=h.seen, created_at=h.seen, modified_at=h.seen))
                else:
                    if row.release_key != h.release_key:
                        row.release_key, row.release_delivered_at = h.release_key, h.seen
                    row.config_cluster_name, row.modified_at = h.cluster, h.seen
                rows += 1
            if inst in polls:
                names, at = polls[inst]
                for key, row in existing.items():
                    if key[1] in names and key not in configs.get(inst, {}):
                        row.modified_at = at
                        rows += 1
        s.commit()
        return rows

    @staticmethod
    def _instance(s: Session, inst: InstanceKey, seen: datetime) -> m.Instance:
        app_id, cluster, data_center, ip = inst
        instance = s.scalar(select(m.Instance).where(
            m.Instance.app_id == app_id, m.Instance.cluster_name == cluster, m.Instance.data_center == data_center,
            m.Instance.ip == ip))
        if instance is None:
            instance = m.Instance(app_id=app_id, cluster_name=cluster, data_center=data_center, ip=ip,
                                  created_at=seen, modified_at=seen)
            s.add(instance)
            s.flush()
        else:
            instance.modified_at = seen
        return instance

    def prune(self, now: datetime | None = None) -> int:
        """Delete records not seen within ``retention`` (configs first, then instances left without any)."""
        cutoff = (now or datetime.now()) - self.retention

        def op(s: Session) -> int:
            configs = s.execute(delete(m.InstanceConfig).where(m.InstanceConfig.modified_at < cutoff))
            held = select(m.InstanceConfig.instance_id).distinct()
            instances = s.execute(delete(m.Instance).where(m.Instance.modified_at < cutoff, m.Instance.id.not_in(held)))
            gone = sum(cast(CursorResult[Any], r).rowcount or 0 for r in (configs, instances))
            s.commit()
            return int(gone)

        removed: int = self.store.read(op)
        if removed:
            log.info("configcenter.instances_pruned", removed=removed, cutoff=cutoff.isoformat())
        return removed

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await run_in_threadpool(self.flush)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            try:
                await run_in_threadpool(self.flush)
                if time.monotonic() - self._last_prune >= self.prune_interval_s:
                    self._last_prune = time.monotonic()
                    await run_in_threadpool(self.prune)
            except Exception:  # a locked or briefly unavailable DB must not stop the recorder
                log.warning("configcenter.instances_flush_failed", exc_info=True)
