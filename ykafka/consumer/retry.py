"""Redelivery of failed messages: retry topics with back-off, then a dead-letter topic.

A handler failure copies the message to ``__ykafka-retry.<len>.<group>.<topic>.retry.<n>`` (n = failures so
far) with a not-before header; the framework consumes the retry topics itself and holds a copy back until it is
due. After ``consumer.retry.max.attempts`` retries the copy goes to ``__ykafka-retry.<len>.<group>.<topic>.dlq``.
The names live in a namespace of their own (``ykafka.acl.retry_prefix``: the group's length, then the group), so
the broker rights a group grant carries for them reach no other app's topic and no other group's retries. The
source offset counts as done only once the broker has acknowledged the copy, so a failure is never lost.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from ykafka import acl as acl_patterns
from ykafka import headers as H
from ykafka.consumer.offsets import Ack, Task
from ykafka.transport import KafkaException, Message, NewTopic, RawAdminClient, RawProducer

log = structlog.get_logger(__name__)

_TOPIC_CHARS = re.compile(r"[^A-Za-z0-9._-]")
_RETRY_SUFFIX = re.compile(r"\.retry\.(\d+)$")
_ERROR_TEXT_MAX = 2000
#: librdkafka properties shared by consumer and producer / admin clients of one cluster.
_SHARED_PREFIXES = ("bootstrap.servers", "security.", "sasl.", "ssl.", "socket.", "broker.", "client.dns",
                    "api.version", "allow.auto.create.topics", "metadata.")


def shared_properties(props: Mapping[str, Any]) -> dict[str, Any]:
    """The connection settings of a consumer configuration, usable for a producer or admin client."""
    return {k: v for k, v in props.items() if k.startswith(_SHARED_PREFIXES) and k != "socket.receive.buffer.bytes"}


def topic_safe(name: str) -> str:
    return _TOPIC_CHARS.sub("_", name)


def group_prefix(group: str) -> str:
    """What every retry and dead-letter topic of ``group`` starts with (``ykafka.acl.retry_prefix``)."""
    return acl_patterns.retry_prefix(topic_safe(group))


def retry_topic(group: str, topic: str, attempt: int) -> str:
    return f"{group_prefix(group)}{topic}.retry.{attempt}"


def dlq_topic(group: str, topic: str) -> str:
    return f"{group_prefix(group)}{topic}.dlq"


def legacy_dlq_topic(group: str, topic: str) -> str:
    """The dead-letter topic's name before issue 37 (``<group>.<topic>.dlq``): what ``ykafka admin dlq replay
    --legacy`` drains after an upgrade. Its broker bindings are gone on a secured cluster (they overlapped other
    apps' topics), so that replay runs with the platform's credentials there."""
    return f"{topic_safe(group)}.{topic}.dlq"


def parse_retry_topic(group: str, topic: str) -> tuple[str, int] | None:
    """``(original topic, attempt)`` when ``topic`` is one of ``group``'s retry topics, else None."""
    prefix = group_prefix(group)
    if not topic.startswith(prefix):
        return None
    match = _RETRY_SUFFIX.search(topic)
    if match is None:
        return None
    original = topic[len(prefix):match.start()]
    return (original, int(match.group(1))) if original else None


def error_text(exc: BaseException) -> str:
    """``ExceptionType: text`` of a handler failure, as the retry / DLQ headers and the trace carry it."""
    return f"{type(exc).__name__}: {exc}"[:_ERROR_TEXT_MAX]


#: What :meth:`RetryRouter.route` did with a failed message: (trace step, destination topic, error text).
Routed = tuple[str, str, str]
RETRIED = "retried"
DEAD_LETTERED = "dead-lettered"


@dataclass(frozen=True)
class RetryPolicy:
    backoff_ms: tuple[int, ...] = (1000, 5000, 30000)
    max_attempts: int = 3
    dlq_enabled: bool = True

    def delay_ms(self, attempt: int) -> int:
        """Back-off before retry ``attempt`` (1-based); the last value repeats."""
        if not self.backoff_ms:
            return 0
        return self.backoff_ms[min(attempt, len(self.backoff_ms)) - 1]


class RetryRouter:
    """Produces retry / DLQ copies and turns consumed retry copies back into handler-ready messages."""

    def __init__(self, group: str, connection: Mapping[str, Any], policy: RetryPolicy,
                 producer_factory: Callable[[dict[str, Any]], RawProducer] = RawProducer) -> None:
        self.group = group
        self.policy = policy
        self._prefix = group_prefix(group)
        self._connection = dict(connection)
        self._producer = producer_factory({
            **self._connection,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        })
        self._redo: deque[tuple[str, bytes | None, bytes | None, H.Headers, Ack]] = deque()
        self._lock = threading.Lock()
        self.sent_retry = 0  # statistics (updated under the lock)
        self.sent_dlq = 0
        self.given_up = 0

    # -- topic names -----------------------------------------------------------------------------------

    def parse_retry_topic(self, topic: str) -> tuple[str, int] | None:
        """``(original topic, attempt)`` when ``topic`` is one of this group's retry topics."""
        return parse_retry_topic(self.group, topic)

    def retry_topics(self, topics: Iterable[str], levels: int) -> list[str]:
        return [retry_topic(self.group, t, n) for t in topics for n in range(1, levels + 1)]

    def retry_pattern(self) -> str:
        """A librdkafka regex subscription matching every retry topic of the group."""
        return "^" + re.escape(self._prefix) + r".+\.retry\.[0-9]+$"

    def ensure_topics(self, topics: Iterable[str], levels: int, timeout: float = 10.0) -> None:
        """Create the retry and DLQ topics of ``topics`` (same partition count) when they are missing."""
        topics = list(topics)
        if not topics:
            return
        admin = RawAdminClient(self._connection)
        try:
            meta = admin.list_topics(timeout=timeout).topics
        except KafkaException as exc:
            log.warning("cannot list topics to create retry topics", error=str(exc))
            return
        wanted: list[NewTopic] = []
        for topic in topics:
            source = meta.get(topic)
            partitions = len(source.partitions) if source is not None and source.partitions else 1
            for name in [*self.retry_topics([topic], levels), dlq_topic(self.group, topic)]:
                if name not in meta:
                    wanted.append(NewTopic(name, num_partitions=partitions, replication_factor=-1))
        if not wanted:
            return
        for name, future in admin.create_topics(wanted, request_timeout=timeout).items():
            try:
                future.result()
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    log.warning("cannot create retry topic; relying on auto-creation", topic=name, error=str(exc))

    # -- consuming retry copies -------------------------------------------------------------------------

    @staticmethod
    def not_before(raw: Message) -> int:
        """Epoch ms before which the copy must not be handled (0 when the header is missing)."""
        return H.get_int(raw.headers(), H.NOT_BEFORE) or 0

    @staticmethod
    def view(raw: Message) -> Message:
        """The copy as the handler sees it: original topic / partition / offset / timestamp, all headers."""
        hdrs = raw.headers()
        topic = H.get_str(hdrs, H.ORIGINAL_TOPIC) or raw.topic()
        partition = H.get_int(hdrs, H.ORIGINAL_PARTITION)
        offset = H.get_int(hdrs, H.ORIGINAL_OFFSET)
        timestamp = H.get_int(hdrs, H.ORIGINAL_TIMESTAMP)
        return Message(
            topic=topic,
            partition=raw.partition() if partition is None else partition,
            offset=raw.offset() if offset is None else offset,
            key=raw.key(),
            value=raw.value(),
            headers=hdrs,
            timestamp=raw.timestamp() if timestamp is None else (1, timestamp),
        )

    # -- failures ---------------------------------------------------------------------------------------

    def route(self, task: Task, msg: Any, exc: BaseException) -> Routed | None:
        """Send a failed message to its next retry topic or the DLQ; ``task`` stays open until acked.

        Returns what was done (for the message trace), or None when the message was given up on
        (dead-lettering disabled after the last retry)."""
        policy = self.policy
        hdrs = msg.headers()
        attempt = (H.get_int(hdrs, H.ATTEMPT) or 0) + 1
        original_topic = H.get_str(hdrs, H.ORIGINAL_TOPIC) or msg.topic() or ""
        now_ms = int(time.time() * 1000)
        error = error_text(exc)
        if attempt <= policy.max_attempts:
            destination = retry_topic(self.group, original_topic, attempt)
            not_before = now_ms + policy.delay_ms(attempt)
            step = RETRIED
            with self._lock:
                self.sent_retry += 1
        elif policy.dlq_enabled:
            destination = dlq_topic(self.group, original_topic)
            not_before = 0
            step = DEAD_LETTERED
            with self._lock:
                self.sent_dlq += 1
        else:
            with self._lock:
                self.given_up += 1
            log.error("handler failed after the last retry; dead-lettering is disabled, message dropped",
                      topic=original_topic, partition=msg.partition(), offset=msg.offset(), attempts=attempt,
                      error=error)
            return None
        timestamp_type, timestamp = msg.timestamp()
        out = H.without(hdrs, H.FAILURE_HEADERS)
        out += [
            (H.ATTEMPT, str(attempt).encode()),
            (H.ERROR, error.encode()),
            (H.FAILED_AT, str(now_ms).encode()),
            (H.GROUP, self.group.encode()),
            (H.ORIGINAL_TOPIC, original_topic.encode()),
            (H.ORIGINAL_PARTITION, str(msg.partition()).encode()),
            (H.ORIGINAL_OFFSET, str(msg.offset()).encode()),
        ]
        if timestamp_type:
            out.append((H.ORIGINAL_TIMESTAMP, str(timestamp).encode()))
        if not_before:
            out.append((H.NOT_BEFORE, str(not_before).encode()))
        ack = task.add_ack()
        log.info("handler failed; message rerouted", topic=original_topic, partition=msg.partition(),
                 offset=msg.offset(), attempt=attempt, to=destination, error=error)
        self._send(destination, msg.key(), msg.value(), out, ack)
        return step, destination, error

    def _send(self, topic: str, key: bytes | None, value: bytes | None, hdrs: Any, ack: Ack) -> None:
        def delivered(err: Any, _msg: Any) -> None:
            if err is None:
                ack.acked = True
                return
            log.error("retry / DLQ copy not acknowledged; sending it again", topic=topic, error=str(err))
            with self._lock:
                self._redo.append((topic, key, value, hdrs, ack))

        while True:
            try:
                self._producer.produce(topic, value=value, key=key, headers=hdrs, on_delivery=delivered)
                return
            except BufferError:
                self._producer.poll(0.05)

    def poll(self, timeout: float = 0.0) -> None:
        """Serve delivery reports (sets acks) and re-send copies whose delivery failed."""
        self._producer.poll(timeout)
        if self._redo:
            with self._lock:
                redo = list(self._redo)
                self._redo.clear()
            for topic, key, value, hdrs, ack in redo:
                self._send(topic, key, value, hdrs, ack)

    def flush(self, timeout: float = 10.0) -> int:
        self.poll()
        return int(self._producer.flush(timeout))
