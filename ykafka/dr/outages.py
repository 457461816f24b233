"""The outages of a producer's primaries and the failback syncs that close them.

An :class:`Outage` opens before the first write of a topic to its standby (it records the standby's end
offsets, so the sync later copies exactly what the outage wrote) and ends when the topic's writes are back
on the primary; a :class:`SyncJob` then copies the standby's outage writes back, and the outage is forgotten
once it finished. Outages are kept on disk (:class:`OutageStore`) so a restarted process still syncs back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from ykafka.dr.health import HealthMonitor
from ykafka.dr.sync import Outage, OutageStore, SyncJob, connection_only
from ykafka.transport import KafkaException, RawConsumer, TopicPartition

log = structlog.get_logger(__name__)

#: how long a new failback sync waits for the cancelled one of its outage to leave the sync group
CANCELLED_SYNC_WAIT_S = 30.0


class Outages:
    """Open and ended outages per (primary, topic), and the sync job of each ended one.

    ``rdkafka_config(cluster)``: librdkafka settings of a cluster (the syncs' and the offset probe's
    connection); ``standby_idle(cluster)``: whether the engine's link to a standby holds nothing unacknowledged
    (a sync finishes only then).
    """

    def __init__(self, directory: Path, rdkafka_config: Callable[[str], Mapping[str, Any]], health: HealthMonitor,
                 standby_idle: Callable[[str], bool], sync_idle_s: float, progress_interval_s: float) -> None:
        self._rdkafka_config = rdkafka_config
        self._health = health
        self._standby_idle = standby_idle
        self._sync_idle_s = sync_idle_s
        self._progress_interval_s = progress_interval_s
        self._lock = threading.RLock()
        self._open: dict[tuple[str, str], Outage] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._syncs: dict[tuple[str, str], SyncJob] = {}
        self._cancelled: dict[tuple[str, str], SyncJob] = {}  # a sync cut short by a new outage, still closing
        self._finished: list[dict[str, Any]] = []
        self._store = OutageStore(directory)
        #: tags this engine's standby writes; its syncs copy back only those (:mod:`ykafka.dr.sync`)
        self.writer = self._store.writer_id()
        self.writer_header = self.writer.encode()
        for outage in self._store.load_all():
            self._open[(outage.primary, outage.topic)] = outage

    def _save(self, outage: Outage) -> None:
        """Keep the outage on disk for a restart; a disk that cannot take it (full: the spill shares it) must not
        fail the send that opened it (the soak's disk-full fault crashed a producer with ENOSPC here)."""
        try:
            self._store.save(outage)
        except OSError as exc:
            log.error("failover.record_unsaved", topic=outage.topic, primary=outage.primary, error=str(exc),
                      consequence="kept in memory: if this process restarts before its sync, the outage's records "
                                  "stay on the standby until an operator syncs them")

    def __bool__(self) -> bool:
        return bool(self._open)

    def known(self, primary: str, topic: str) -> bool:
        """An outage of ``topic`` on ``primary`` is open, or ended and not yet synced back."""
        return (primary, topic) in self._open

    def is_open(self, primary: str, topic: str) -> bool:
        """Writes of ``topic`` go to the standby and the outage recorded where they start."""
        outage = self._open.get((primary, topic))
        return outage is not None and outage.ended is None

    def entries(self) -> list[tuple[str, str]]:
        """(primary, topic) of every open or not yet synced outage."""
        return list(self._open)

    def syncing(self, primary: str, topic: str) -> bool:
        return (primary, topic) in self._syncs

    @property
    def busy(self) -> bool:
        """A sync runs or an ended outage waits for one (:meth:`DisasterRecovery.wait_idle`)."""
        return bool(self._syncs) or any(o.ended is not None for o in list(self._open.values()))

    def begin(self, primary: str, standby: str, topic: str) -> None:
        """Open the outage of ``topic`` before its first write to ``standby``: concurrent callers wait until the
        standby's start offsets are recorded (a network call); an outage ended but not yet synced is reopened
        with its offsets (its running sync is cancelled: it commits only what the primary acknowledged)."""
        key = (primary, topic)
        if self.is_open(primary, topic):
            return
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            # under the engine-wide lock too: end() (the failback) and _sync_done() change the same outage and its
            # sync, and a send whose route was decided just before the primary came back reopens it meanwhile; the
            # reopen must cancel any sync end() started, or that sync could finish without what this send writes
            with self._lock:
                existing = self._open.get(key)
                if existing is not None and existing.ended is None:
                    return
                if existing is not None:  # a new outage before the last sync finished: keep its offsets
                    job = self._syncs.pop(key, None)
                    if job is not None:
                        job.cancel()  # the next sync resumes from what this one committed
                        self._cancelled[key] = job
                    existing.ended = None
                    self._save(existing)
                    return
            outage = Outage(primary, standby, topic, time.time(), self._end_offsets(standby, topic),  # network
                            writer=self.writer)
            with self._lock:
                self._save(outage)
                self._open[key] = outage
            log.warning("failover.begin", topic=topic, primary=primary, standby=standby,
                        start_offsets=outage.start_offsets)

    def _end_offsets(self, cluster: str, topic: str) -> dict[str, int] | None:
        conf = connection_only(self._rdkafka_config(cluster))
        conf.update({"group.id": "ykafka-failover-probe", "enable.auto.commit": False, "log_level": 0})
        consumer = RawConsumer(conf)
        try:
            meta = consumer.list_topics(timeout=2)
            info = meta.topics.get(topic)
            if info is None or info.error is not None:
                return {}
            return {str(p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=2)[1]
                    for p in info.partitions}
        except KafkaException as exc:
            log.warning("failover.offsets_unknown", topic=topic, cluster=cluster, error=str(exc))
            return None  # unknown: the sync starts from the beginning (duplicates, never loss)
        finally:
            consumer.close()

    def end(self, primary: str, topic: str) -> None:
        """Writes of ``topic`` are back on ``primary``: mark its outage ended and start the sync once the standby
        answers (and a cancelled sync left the group); the caller retries until the sync started."""
        with self._lock:
            key = (primary, topic)
            outage = self._open.get(key)
            if outage is None or key in self._syncs:
                return
            if outage.ended is None:
                outage.ended = time.time()
                self._save(outage)
                log.warning("failover.end", topic=topic, primary=primary, standby=outage.standby)
            if not self._health.is_up(outage.standby):
                return  # the maintenance loop retries once the standby answers
            cancelled = self._cancelled.get(key)
            if cancelled is not None:
                if cancelled.running:  # its consumer is still in the sync group: a new member beside it waits for
                    # a rebalance (Tansu never assigns it); the maintenance loop retries within a second. Not for
                    # ever: a soak's cancelled job never ended (stuck in a call to a frozen cluster) and its
                    # outage's 22,624 records stayed on the standby with no sync started again
                    waited = time.monotonic() - cancelled.cancelled_at
                    if waited < CANCELLED_SYNC_WAIT_S:
                        return
                    log.warning("failback.cancelled_sync_stuck", topic=topic, primary=primary, waited_s=round(waited),
                                consequence="a new sync starts; it takes the partitions once the stuck one leaves "
                                            "the sync group (its max.poll.interval.ms, 90 s)")
                del self._cancelled[key]
            standby = outage.standby
            self._syncs[key] = SyncJob(
                outage, self._rdkafka_config(standby), self._rdkafka_config(primary),
                lambda: self._standby_idle(standby), self._sync_done, idle_s=self._sync_idle_s,
                progress_interval_s=self._progress_interval_s)

    def ended_elsewhere(self, primary: str, topic: str, now_primary: str) -> None:
        """The topic's primary changed in hot config while its outage was open: its sync waits for an operator."""
        outage = self._open.get((primary, topic))
        if outage is not None and outage.ended is not None:
            log.warning("failback.route_changed", topic=topic, primary=primary, now=now_primary)

    def _sync_done(self, job: SyncJob) -> None:
        key = (job.outage.primary, job.outage.topic)
        with self._lock:
            self._syncs.pop(key, None)
            current = self._open.get(key)
            if current is job.outage and current.ended is not None:
                self._open.pop(key, None)
                self._store.delete(current)
            self._finished = (self._finished + [job.status()])[-20:]

    def status(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(outages, syncs: running ones first, then the last 20 finished)."""
        with self._lock:
            syncs = list(self._syncs.values())
            outages = list(self._open.values())
            finished = list(self._finished)
        return ([{"primary": o.primary, "standby": o.standby, "topic": o.topic, "started": o.started,
                  "ended": o.ended, "synced": o.synced} for o in outages],
                [job.status() for job in syncs] + finished)

    def stop(self) -> None:
        """Stop the running syncs (their progress is on disk and in the sync group)."""
        for job in list(self._syncs.values()):
            job.stop()
