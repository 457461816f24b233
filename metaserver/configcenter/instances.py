"""Who holds which release: Apollo's Instance / InstanceConfig records, written in batches.

Every ``/configs`` answer records the client (app, cluster, data center, IP) and the release key of each
release it was served; every ``/notifications/v2`` poll marks the client's namespaces seen. Calls only touch
an in-memory map; a background task writes it in one transaction per interval, so a busy config service
does not wait on the database. As in Apollo, a record whose release is unchanged is rewritten at most once
per ``refresh_s`` (its last-seen time is that precise), and records not seen for ``retention`` are pruned.
``YKAFKA_CC_INSTANCE_RECORDS=0`` turns recording off (the benchmark's baseline).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import structlog
from sqlalchemy import CursorResult, case, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from . import models as m
from .readmodel import ReleaseView
from .store import Store

log = structlog.get_logger(__name__)

InstanceKey = tuple[str, str, str, str]  # app id, cluster, data center, ip
ConfigKey = tuple[str, str]  # config app id, namespace (lower-case: Apollo compares them case-insensitively)


def _norm(inst: InstanceKey) -> InstanceKey:
    """Apollo matches app and cluster case-insensitively (the id cache must too)."""
    return inst[0].lower(), inst[1].lower(), inst[2], inst[3]


def _upsert(s: Session) -> Any:
    """The dialect's INSERT with ON CONFLICT (SQLite and PostgreSQL both have it)."""
    return postgresql.insert if s.get_bind().dialect.name == "postgresql" else sqlite.insert


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
        self._ids: dict[InstanceKey, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._last_prune = 0.0
        self.enabled = os.environ.get("YKAFKA_CC_INSTANCE_RECORDS", "1").strip() not in ("0", "false", "off")

    # -- the request path: memory only ------------------------------------------------------------
    def served(self, app_id: str, cluster: str, data_center: str | None, ip: str | None,
               releases: Iterable[ReleaseView]) -> None:
        """A ``/configs`` answer: the client now holds ``releases`` (one per namespace layer)."""
        if not ip or not self.enabled:
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
        if not ip or not self.enabled:
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
        """Bulk upserts (one statement per table), so a flush of thousands of records stays short."""
        insert = _upsert(s)
        seen: dict[InstanceKey, datetime] = {}
        for inst, held in configs.items():
            seen[inst] = max(h.seen for h in held.values())
        for inst, (_, at) in polls.items():
            seen[inst] = max(at, seen.get(inst, at))
        stmt = insert(m.Instance)
        s.execute(stmt.on_conflict_do_update(index_elements=["app_id", "cluster_name", "ip", "data_center"],
                                             set_={"modified_at": stmt.excluded.modified_at}),
                  [{"app_id": a, "cluster_name": c, "data_center": d, "ip": ip, "created_at": at, "modified_at": at}
                   for (a, c, d, ip), at in seen.items()])
        ids = self._instance_ids(s, list(seen))
        rows = [{"instance_id": ids[_norm(inst)], "config_app_id": key[0], "config_cluster_name": h.cluster,
                 "config_namespace_name": key[1], "release_key": h.release_key, "release_delivered_at": h.seen,
                 "created_at": h.seen, "modified_at": h.seen}
                for inst, held in configs.items() for key, h in held.items()]
        if rows:
            stmt = insert(m.InstanceConfig)
            table = m.InstanceConfig.__table__.c
            s.execute(stmt.on_conflict_do_update(
                index_elements=["instance_id", "config_app_id", "config_namespace_name"],
                set_={"release_key": stmt.excluded.release_key, "modified_at": stmt.excluded.modified_at,
                      "config_cluster_name": stmt.excluded.config_cluster_name,
                      "release_delivered_at": case((table.release_key != stmt.excluded.release_key,
                                                    stmt.excluded.release_delivered_at),
                                                   else_=table.release_delivered_at)}), rows)
        touched = 0
        for inst, (names, at) in polls.items():
            touched += cast(CursorResult[Any], s.execute(update(m.InstanceConfig).where(
                m.InstanceConfig.instance_id == ids[_norm(inst)], m.InstanceConfig.config_namespace_name.in_(names),
                m.InstanceConfig.modified_at < at).values(modified_at=at))).rowcount or 0
        s.commit()
        return len(rows) + touched

    def _instance_ids(self, s: Session, wanted: list[InstanceKey]) -> dict[InstanceKey, int]:
        """Ids of the instances (cached: an instance row is never renumbered while it lives)."""
        missing = {_norm(i) for i in wanted} - set(self._ids)
        if missing:
            apps = {a for a, _, _, _ in missing}
            for row in s.execute(select(m.Instance.id, m.Instance.app_id, m.Instance.cluster_name,
                                        m.Instance.data_center, m.Instance.ip).where(m.Instance.app_id.in_(apps))):
                self._ids[_norm((row.app_id, row.cluster_name, row.data_center, row.ip))] = row.id
        return self._ids

    def prune(self, now: datetime | None = None) -> int:
        """Delete records not seen within ``retention`` (configs first, then instances left without any)."""
        cutoff = (now or datetime.now()) - self.retention

        def op(s: Session) -> int:
            configs = s.execute(delete(m.InstanceConfig).where(m.InstanceConfig.modified_at < cutoff))
            held = select(m.InstanceConfig.instance_id).distinct()
            instances = s.execute(delete(m.Instance).where(m.Instance.modified_at < cutoff, m.Instance.id.not_in(held)))
            gone = sum(cast(CursorResult[Any], r).rowcount or 0 for r in (configs, instances))
            s.commit()
            self._ids.clear()
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
