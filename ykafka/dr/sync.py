"""The failback sync: after an outage, copy what was written to the standby back to the primary.

A :class:`SyncJob` consumes the standby from the offsets recorded before the first outage write (or from
the sync group's committed offsets), produces to the primary, and commits on the standby only after the
primary acknowledged. At-least-once; resumable from the committed group and an :class:`OutageStore` file.

Several producer processes of one app fail over at different moments, each recording its own start offsets. A
sync group shared by them let the assignor hand one process's partitions to another whose recorded start lay past
the first one's writes: those were never copied (issue 38: 441 records of one run). So each engine has a writer id
(persisted beside its outages), tags every record it writes to the standby with it (``ykafka-dr-writer``), and
syncs back in a group of its own (``ykafka-failback.<primary>.<topic>.<writer>``, one member: every partition)
exactly the records carrying its id, from the offsets it recorded itself: correct whatever the assignor does and
whenever the other processes fail over or back, at the cost of each process reading the others' records too.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog

from ykafka import headers as H
from ykafka.cachefiles import write_private
from ykafka.transport import (
    KafkaException,
    Message,
    RawConsumer,
    RawKafkaError,
    RawProducer,
    TopicPartition,
    new_producer,
)

log = structlog.get_logger(__name__)

_CONNECTION_PREFIXES = ("bootstrap.servers", "metadata.broker.list", "security.protocol", "sasl.", "ssl.",
                        "client.dns.lookup", "broker.address.family", "socket.connection.setup.timeout.ms",
                        "client.rack")



# --- outages and the failback sync --------------------------------------------------------------------

@dataclass
class Outage:
    """Writes of ``topic`` moved from ``primary`` to ``standby``; persisted until the sync finished."""

    primary: str
    standby: str
    topic: str
    started: float
    start_offsets: dict[str, int] | None = None  # partition -> standby offset before the first outage write
    ended: float | None = None
    synced: int = 0
    #: the id the writing engine tagged its standby writes with (``ykafka-dr-writer``); None: an outage recorded
    #: before writer ids existed, synced in the shared group without a filter, as then
    writer: str | None = None

    @property
    def group(self) -> str:
        if self.writer:
            return f"ykafka-failback.{self.primary}.{self.topic}.{self.writer}"
        return f"ykafka-failback.{self.primary}.{self.topic}"


class OutageStore:
    """One JSON progress file per (primary, topic) outage under ``<dir>``, written atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def writer_id(self) -> str:
        """This spill directory's writer id (created once): a restarted process on the same spill slot keeps it, so
        it resumes its own sync group and still recognises the records it wrote to the standby."""
        path = self.directory / "writer-id"
        try:
            found = path.read_text().strip()
            if re.fullmatch(r"[0-9a-f]{16}", found):
                return found
        except FileNotFoundError:
            pass
        found = uuid.uuid4().hex[:16]
        write_private(path, found)
        return found

    def _path(self, primary: str, topic: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", f"{primary}__{topic}")
        return self.directory / f"{safe}.json"

    def save(self, outage: Outage) -> None:
        # a temporary file per thread: a send reopening the outage and the failback ending it may save at once
        write_private(self._path(outage.primary, outage.topic), json.dumps(asdict(outage)))

    def delete(self, outage: Outage) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(outage.primary, outage.topic).unlink()

    def load_all(self) -> list[Outage]:
        out: list[Outage] = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                out.append(Outage(**json.loads(path.read_text())))
            except (OSError, ValueError, TypeError) as exc:
                log.warning("failback.bad_progress_file", path=str(path), error=str(exc))
        return out


def _writer_of(m: Message) -> bytes | None:
    """The ``ykafka-dr-writer`` header of a consumed record (a consumed record's headers are a list of pairs)."""
    return H.get(m.headers(), H.DR_WRITER)


def connection_only(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The connection / security part of a librdkafka config (for consumers and admin clients)."""
    return {k: v for k, v in conf.items() if isinstance(k, str) and k.startswith(_CONNECTION_PREFIXES)}


class SyncJob:
    """Copy a topic's outage writes from the standby back to the primary, then finish.

    Consumes the standby in the group ``ykafka-failback.<primary>.<topic>`` (so several processes share
    the work, and a restart resumes from the committed offsets), produces every record to the primary with
    its key, value, headers and timestamp (plus a ``ykafka-synced-from`` header), and commits a batch on
    the standby only after the primary acknowledged all of it. Done when every partition is read up to its
    end, the standby has nothing in flight for us, and nothing new arrived for ``idle_s``.
    """

    def __init__(self, outage: Outage, standby_conf: Mapping[str, Any], primary_conf: Mapping[str, Any],
                 standby_idle: Callable[[], bool], on_done: Callable[[SyncJob], None],
                 idle_s: float = 2.0, batch: int = 2000, progress_interval_s: float = 5.0) -> None:
        self.outage = outage
        self._standby_conf = dict(standby_conf)
        self._primary_conf = dict(primary_conf)
        self._standby_idle = standby_idle
        self._on_done = on_done
        self.idle_s = idle_s
        self.batch = batch
        self.progress_interval_s = progress_interval_s
        self.state = "starting"
        self.copied = 0
        self.skipped = 0  # records of the standby written by other engines (or natively), read past
        self.left: int | None = None
        self.error: str | None = None
        self.started = time.monotonic()
        self._stop = threading.Event()
        self.cancelled_at = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"ykafka-failback-{outage.primary}-{outage.topic}")
        self._thread.start()

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                self._copy()
                if self.state == "done":
                    self._on_done(self)
                return
            except Exception as exc:
                attempt += 1
                self.error = str(exc)[:300]
                self.state = "retrying"
                log.warning("failback.sync_retry", topic=self.outage.topic, primary=self.outage.primary,
                            error=self.error, attempt=attempt)
                self._stop.wait(min(30.0, 1.0 * attempt))

    def _copy(self) -> None:
        o = self.outage
        conf = connection_only(self._standby_conf)
        conf.update({"group.id": o.group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "fetch.wait.max.ms": 100, "enable.partition.eof": False,
                     "isolation.level": "read_uncommitted", "log_level": 3,
                     # a subscription made while the standby's broker did not list the topic yet ("Subscribed
                     # topic not available") waits for the next metadata refresh: seconds, not librdkafka's 5 min
                     "topic.metadata.refresh.interval.ms": 2000,
                     # a job stuck in a call (a frozen cluster) leaves the group within this, not librdkafka's 5 min:
                     # the next sync of its outage can then take the partitions (Outages.end)
                     "max.poll.interval.ms": 90_000})
        pconf = {k: v for k, v in self._primary_conf.items() if k not in ("on_delivery", "error_cb")}
        pconf.update({"enable.idempotence": True, "acks": "all", "message.timeout.ms": 30_000,
                      "partitioner": "murmur2_random"})
        consumer = RawConsumer(conf)
        producer = new_producer(pconf, "dr")
        assigned: list[TopicPartition] = []
        start_offsets = o.start_offsets or {}

        def on_assign(c: RawConsumer, parts: list[TopicPartition]) -> None:
            committed = c.committed(parts, timeout=10)
            for tp, cp in zip(parts, committed, strict=True):
                if cp.offset >= 0:
                    tp.offset = cp.offset
                else:
                    tp.offset = start_offsets.get(str(tp.partition), -2)  # -2: beginning
            assigned[:] = parts
            c.assign(parts)
            log.info("failback.sync_assigned", topic=o.topic, partitions={tp.partition: tp.offset for tp in parts})

        def on_revoke(c: RawConsumer, parts: list[TopicPartition]) -> None:
            log.info("failback.sync_revoked", topic=o.topic, partitions=[tp.partition for tp in parts])
            assigned[:] = []
            c.unassign()

        consumer.subscribe([o.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        self.state = "running"
        log.info("failback.sync_start", topic=o.topic, source=o.standby, target=o.primary, group=o.group)
        primary_partitions: int | None = None
        last_data = time.monotonic()
        last_log = last_lookup = time.monotonic()
        failures: list[str] = []
        writer = o.writer.encode() if o.writer else None
        ends: dict[int, int] | None = None
        try:
            while not self._stop.is_set():
                msgs = consumer.consume(self.batch, 0.5)
                good = [m for m in msgs if m.error() is None]
                for m in msgs:
                    err = m.error()
                    if err is not None and err.code() != RawKafkaError._PARTITION_EOF:
                        log.warning("failback.consume_error", topic=o.topic, error=err.str())
                if good:
                    mine = good if writer is None else [m for m in good if _writer_of(m) == writer]
                    if mine:
                        if primary_partitions is None:
                            primary_partitions = self._partitions(producer, o.topic)
                        self._forward(producer, mine, primary_partitions, failures)
                        if failures:
                            raise RuntimeError(f"primary refused synced records: {failures[0]}")
                    offsets: dict[int, int] = {}
                    for m in good:
                        part, off = int(m.partition() or 0), int(m.offset() or 0)
                        offsets[part] = max(offsets.get(part, -1), off + 1)
                    consumer.commit(offsets=[TopicPartition(o.topic, p, off) for p, off in offsets.items()],
                                    asynchronous=False)
                    self.copied += len(mine)
                    self.skipped += len(good) - len(mine)
                    o.synced += len(mine)
                    if mine or writer is None:
                        last_data = time.monotonic()
                if time.monotonic() - last_log >= self.progress_interval_s:
                    self._progress(consumer, assigned)
                    last_log = time.monotonic()
                if not assigned and time.monotonic() - last_lookup >= 2.0:
                    consumer.list_topics(o.topic, timeout=5)  # a metadata answer naming it starts the assignment
                    last_lookup = time.monotonic()
                if assigned and time.monotonic() - last_data >= self.idle_s and self._standby_idle():
                    if writer is None:
                        self.left = self._lag(consumer, assigned)
                    else:
                        # every record this engine wrote lies below the ends seen once its standby link held
                        # nothing more (the outage ended first): records other processes still write to the
                        # standby later do not keep this sync running
                        if ends is None or set(ends) != {tp.partition for tp in assigned}:
                            ends = self._ends(consumer, assigned)
                        self.left = self._lag(consumer, assigned, ends)
                    if self.left == 0:
                        self.state = "done"
                        break
        finally:
            producer.flush(10)
            with contextlib.suppress(Exception):
                consumer.close()
        elapsed = max(1e-6, time.monotonic() - self.started)
        log.info("failback.sync_done", topic=o.topic, source=o.standby, target=o.primary, copied=self.copied,
                 skipped=self.skipped, group=o.group, rate=round(self.copied / elapsed), state=self.state)

    @staticmethod
    def _partitions(producer: RawProducer, topic: str) -> int:
        meta = producer.list_topics(topic, timeout=10)
        info = meta.topics.get(topic)
        return len(info.partitions) if info is not None and info.error is None else 0

    def _forward(self, producer: RawProducer, msgs: list[Message], partitions: int, failures: list[str]) -> None:
        pending = [len(msgs)]

        def delivered(err: RawKafkaError | None, _m: Message) -> None:
            pending[0] -= 1
            if err is not None:
                failures.append(err.str())

        for m in msgs:
            headers = list(m.headers() or [])
            headers.append((H.SYNCED_FROM, self.outage.standby.encode()))
            kwargs: dict[str, Any] = {"value": m.value(), "key": m.key(), "headers": headers,
                                      "on_delivery": delivered}
            ts_type, ts = m.timestamp()
            if ts_type and ts > 0:
                kwargs["timestamp"] = ts
            part = int(m.partition() or 0)
            if 0 <= part < partitions:  # same partition as on the standby; re-hashed by key if it has fewer
                kwargs["partition"] = part
            while True:
                try:
                    producer.produce(self.outage.topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
        deadline = time.monotonic() + 60
        while pending[0] > 0 and time.monotonic() < deadline and not failures:
            producer.poll(0.05)
        if pending[0] > 0 and not failures:
            failures.append(f"{pending[0]} records not acknowledged by {self.outage.primary} within 60s")

    @staticmethod
    def _ends(consumer: RawConsumer, assigned: list[TopicPartition]) -> dict[int, int]:
        return {tp.partition: consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=5,
                                                             cached=False)[1] for tp in assigned}

    def _lag(self, consumer: RawConsumer, assigned: list[TopicPartition], ends: dict[int, int] | None = None) -> int:
        # librdkafka knows no position before a partition's first message: one assigned at its end (a cancelled
        # sync of the same group copied it all) has none, so the offset it was assigned at stands in; counting
        # from 0 there kept such a sync "running" with everything left, for ever (seen 1 in 3 runs)
        start = {tp.partition: tp.offset for tp in assigned}
        lag = 0
        for tp in consumer.position(assigned):
            low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=5,
                                                       cached=False)
            if ends is not None:
                high = min(high, ends.get(tp.partition, high))
            position = tp.offset if tp.offset >= 0 else start.get(tp.partition, -1)
            lag += max(0, high - (position if position >= 0 else low))
        return lag

    def _progress(self, consumer: RawConsumer, assigned: list[TopicPartition]) -> None:
        with contextlib.suppress(KafkaException):
            self.left = self._lag(consumer, assigned) if assigned else None
        elapsed = max(1e-6, time.monotonic() - self.started)
        log.info("failback.sync_progress", topic=self.outage.topic, target=self.outage.primary,
                 done=self.copied, left=self.left, rate=round(self.copied / elapsed))

    def status(self) -> dict[str, Any]:
        elapsed = max(1e-6, time.monotonic() - self.started)
        return {"topic": self.outage.topic, "from": self.outage.standby, "to": self.outage.primary,
                "state": self.state, "copied": self.copied, "skipped": self.skipped, "left": self.left,
                "rate": round(self.copied / elapsed), "error": self.error}

    @property
    def running(self) -> bool:
        """Its thread still runs (a cancelled job closes its consumer, leaving the sync group, before it ends)."""
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def cancel(self) -> None:
        """Stop without waiting (the primary failed again); committed progress is kept."""
        self.state = "cancelled"
        self.cancelled_at = time.monotonic()
        self._stop.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)


