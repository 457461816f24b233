"""``ykafka admin dlq replay GROUP TOPIC``: re-publish dead-lettered messages to their original topic.

The DLQ (``__ykafka-retry.<len>.<group>.<topic>.dlq``) is a topic, so nothing is ever removed from it; replay
progress is the committed position of the consumer group ``ykafka-dlq-replay.<group>``, and a position only moves past a
message once its re-published copy is acknowledged by the broker. An interrupted replay resumes where it
stopped and never skips a message (a message may be re-published twice if the replay dies between the
acknowledgement and the commit). ``--since`` filters by the time a message was dead-lettered; older
messages are left in place and hold the committed position back, so a later full replay still gets them.
Re-published copies keep the key, value and user headers (including ``ykafka-id``), drop the failure
headers, and carry ``ykafka-replayed-from``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import click
import structlog
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ykafka import headers as H
from ykafka.consumer.offsets import PartitionTracker
from ykafka.consumer.retry import dlq_topic, legacy_dlq_topic, shared_properties, topic_safe
from ykafka.transport import KafkaException, RawConsumer, RawProducer, TopicPartition

log = structlog.get_logger(__name__)
console = Console(stderr=True)

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def replay_group(group: str) -> str:
    return f"ykafka-dlq-replay.{topic_safe(group)}"


def parse_since(text: str, now: float | None = None) -> int:
    """Epoch ms of ``--since``: an ISO-8601 time (UTC when no zone) or a duration back from now (``2h``)."""
    now = time.time() if now is None else now
    hint = "use an ISO-8601 time (2024-05-01T12:00) or a duration (30m, 2h, 1d)"
    match = _DURATION.match(text.strip())
    if match:
        back = float(match.group(1)) * _UNITS[match.group(2)]
        if not back <= now:  # before the epoch, or so many digits the float is infinite
            raise click.BadParameter(f"a duration of at most {int(now // 86400)}d: {hint}")
        return int((now - back) * 1000)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(hint) from None  # the input is not echoed back
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


@dataclass
class ReplayResult:
    dlq: str
    replayed: int = 0
    failed: int = 0
    committed: dict[int, int] = field(default_factory=dict)


def replay(connection: Mapping[str, Any], group: str, topic: str, since_ms: int | None = None,
           limit: int | None = None, from_beginning: bool = False, idle_timeout: float = 3.0,
           progress: Callable[[int, int], None] | None = None, only: Collection[tuple[int, int]] | None = None,
           skip: Collection[tuple[int, int]] = (), legacy: bool = False) -> ReplayResult:
    """Re-publish the group's dead letters (``dlq_topic``) to ``topic``; ``progress(done, total)`` is called as
    it goes.

    ``only``: re-publish just these (partition, offset) messages; the others are left, as ``since_ms`` leaves
    older ones (the committed position stays before the first one left). ``skip``: messages already
    re-published one by one: counted done without publishing them again, so the position can pass them.
    ``legacy``: drain the group's dead-letter topic of the naming before issue 37 (``<group>.<topic>.dlq``).
    """
    if only is not None:
        only = set(only)
        limit = len(only) if limit is None else min(limit, len(only))
    skip = set(skip)
    dlq = legacy_dlq_topic(group, topic) if legacy else dlq_topic(group, topic)
    result = ReplayResult(dlq)
    conn = shared_properties(connection)
    consumer = RawConsumer({**conn, "group.id": replay_group(group), "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": False})
    producer = RawProducer({**conn, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    try:
        meta = consumer.list_topics(dlq, timeout=10).topics.get(dlq)
        if meta is None or meta.error is not None or not meta.partitions:
            log.info("no dead-letter topic", topic=dlq)
            return result
        partitions = sorted(meta.partitions)
        starts = _start_offsets(consumer, dlq, partitions, from_beginning)
        total = 0
        for p in partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(dlq, p), timeout=10)
            total += max(0, high - starts[p])
        if limit is not None:
            total = min(total, limit)
        consumer.assign([TopicPartition(dlq, p, starts[p]) for p in partitions])
        trackers = {p: PartitionTracker(dlq, p) for p in partitions}
        failed: list[Any] = []
        taken = 0
        idle_since = time.monotonic()
        while limit is None or taken < limit:
            want = 500 if limit is None or only is not None else min(500, limit - taken)
            msgs = [m for m in consumer.consume(want, 0.2) if m.error() is None]
            producer.poll(0)
            if not msgs:
                if time.monotonic() - idle_since >= idle_timeout:
                    break
                continue
            idle_since = time.monotonic()
            for msg in msgs:
                where = (msg.partition(), int(msg.offset() or 0))
                if where in skip:
                    trackers[where[0]].add([msg], where[1], where[1]).finished = True
                    continue
                if (since_ms is not None and msg.timestamp()[1] < since_ms) or (only is not None and where not in only):
                    # Older than --since, or not selected: left for a later replay. It stays "not done", so
                    # the committed position never passes it (what this run re-publishes after it may be
                    # re-published again by a later full replay unless skipped; handlers dedupe on ykafka-id).
                    offset = int(msg.offset() or 0)
                    trackers[msg.partition()].add([msg], offset, offset)
                    continue
                _republish(producer, msg, topic, trackers[msg.partition()], result, failed)
                taken += 1
            _commit(consumer, trackers, result, sync=False)
            if progress is not None:
                progress(result.replayed, max(total, taken))
        while producer.flush(1.0):
            pass
        _commit(consumer, trackers, result, sync=True)
        result.failed = len(failed)
        if progress is not None:
            progress(result.replayed, max(total, taken))
        return result
    finally:
        producer.flush(10)
        consumer.close()


def _start_offsets(consumer: RawConsumer, dlq: str, partitions: list[int], from_beginning: bool) -> dict[int, int]:
    starts = {p: 0 for p in partitions}
    if not from_beginning:
        for tp in consumer.committed([TopicPartition(dlq, p) for p in partitions], timeout=10):
            if tp.offset >= 0:
                starts[tp.partition] = tp.offset
    return starts


def _republish(producer: RawProducer, msg: Any, topic: str, tracker: PartitionTracker, result: ReplayResult,
               failed: list[Any]) -> None:
    offset = int(msg.offset())
    task = tracker.add([msg], offset, offset)
    ack = task.add_ack()
    task.finished = True
    original = H.get_str(msg.headers(), H.ORIGINAL_TOPIC) or topic
    out: Any = H.without(msg.headers(), H.FAILURE_HEADERS)
    out.append((H.REPLAYED_FROM, f"{msg.topic()}:{msg.partition()}:{offset}".encode()))

    def delivered(err: Any, _msg: Any) -> None:
        if err is None:
            ack.acked = True
            result.replayed += 1
        else:  # the position stays before this message: the next replay tries it again
            log.error("re-publish failed", topic=original, dlq_offset=offset, error=str(err))
            failed.append(err)

    while True:
        try:
            producer.produce(original, key=msg.key(), value=msg.value(), headers=out, on_delivery=delivered)
            return
        except BufferError:
            producer.poll(0.1)


def _commit(consumer: RawConsumer, trackers: Mapping[int, PartitionTracker], result: ReplayResult, sync: bool) -> None:
    offsets = []
    for p, tracker in trackers.items():
        pos = tracker.position()
        if pos is not None and pos != tracker.committed:
            offsets.append(TopicPartition(tracker.topic, p, pos))
            tracker.committed = pos
            result.committed[p] = pos
    if not offsets:
        return
    try:
        if sync:
            consumer.commit(offsets=offsets, asynchronous=False)
        else:
            consumer.commit(offsets=offsets, asynchronous=True)
    except KafkaException as exc:
        log.warning("replay commit failed; the next replay may re-publish some messages", error=str(exc))


def _connection(bootstrap: str | None, group: str, topic: str) -> dict[str, Any]:
    if bootstrap:
        return {"bootstrap.servers": bootstrap}
    from ykafka.runtime import Runtime

    runtime = Runtime.from_conf({}, "consumer", group=group)  # identity from YKAFKA_* environment
    runtime.start()
    try:
        runtime.check_acl("group", group)
        runtime.check_acl("produce", topic)
        return runtime.rdkafka_config(runtime.route(topic=topic, group=group))
    finally:
        runtime.close()


@click.group("dlq")
def dlq() -> None:
    """Dead-letter topics of the consumer framework (__ykafka-retry.<len>.<group>.<topic>.dlq)."""


@dlq.command("replay")
@click.argument("group")
@click.argument("topic")
@click.option("--since", default=None, help="only messages dead-lettered at/after this: ISO-8601 or 30m / 2h / 1d")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="re-publish at most N messages")
@click.option("--bootstrap", envvar="YKAFKA_BOOTSTRAP", default=None,
              help="brokers (env YKAFKA_BOOTSTRAP); default: the cluster the runtime routes TOPIC to, using the "
                   "app identity in YKAFKA_APP_ID / YKAFKA_APP_SECRET / YKAFKA_METASERVER")
@click.option("--from-beginning", is_flag=True, help="ignore earlier replay progress and start at the oldest message")
@click.option("--legacy", is_flag=True, help="drain the dead-letter topic of the naming before ykafka 0.1 issue 37 "
                                            "(<group>.<topic>.dlq) after an upgrade")
@click.option("--idle-timeout", type=float, default=3.0, show_default=True,
              help="stop after this many seconds without a new dead-lettered message")
def replay_cmd(group: str, topic: str, since: str | None, limit: int | None, bootstrap: str | None,
               from_beginning: bool, idle_timeout: float, legacy: bool) -> None:
    """Re-publish GROUP's dead-lettered messages of TOPIC to TOPIC, with their headers."""
    since_ms = parse_since(since) if since else None
    connection = _connection(bootstrap, group, topic)
    columns = (TextColumn("[bold]replaying {task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(legacy_dlq_topic(group, topic) if legacy else dlq_topic(group, topic), total=None)
        result = replay(connection, group, topic, since_ms=since_ms, limit=limit, from_beginning=from_beginning,
                        idle_timeout=idle_timeout, legacy=legacy,
                        progress=lambda done, total: bar.update(task, completed=done, total=total))
    click.echo(f"re-published {result.replayed} message(s) from {result.dlq} to {topic}"
               + (f"; {result.failed} failed (kept for the next replay)" if result.failed else ""))
    if result.failed:
        raise SystemExit(1)
