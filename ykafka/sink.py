"""The observability event sink: trace, metric and client events batched off the hot path to their topics.

An emit appends one tuple to a bounded in-memory queue (a :class:`Channel`); a background thread drains the
queues in batches into a dedicated librdkafka producer that writes :mod:`ykafka.events` batches. When a
queue is full, or the trace cluster is unreachable long enough for the producer's own queue to fill or
its messages to time out, events are *dropped and counted* (:meth:`EventSink.stats`): business sends
never wait for observability. Used by :mod:`ykafka.tracing` and :mod:`ykafka.metrics`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from itertools import repeat, starmap
from typing import Any

import structlog

from ykafka import catalog, events
from ykafka.config import Option

log = structlog.get_logger(__name__)


#: local options of the trace / metrics / client-event sink
OPTIONS = (
    Option("ykafka.trace.cluster", catalog.optional_text, None,
     "cluster receiving __ykafka_trace / __ykafka_metrics / __ykafka_clients (default: the default cluster)"),
    Option("ykafka.trace.queue.max", catalog.int_range(100, 10_000_000), 100_000,
     "trace / metrics events kept in memory while waiting to be sent; beyond it they are dropped and counted"),
    Option("ykafka.trace.linger.ms", catalog.int_range(0, 60_000), 200,
           "batching delay of the trace / metrics producer"),
)


#: librdkafka settings of the observability producer: never blocks, small memory, no idempotence.
SINK_PRODUCER_DEFAULTS: dict[str, Any] = {
    "acks": "1",
    "enable.idempotence": False,
    "compression.type": "lz4",  # JSON batches shrink ~5x: less broker and network load from tracing
    "linger.ms": 200,
    "message.timeout.ms": 30_000,
    "queue.buffering.max.messages": 20_000,
    "queue.buffering.max.kbytes": 65_536,
    "socket.timeout.ms": 10_000,
    "reconnect.backoff.max.ms": 5_000,
}


class Channel:
    """One queue of an :class:`EventSink`. Its parts are public so a hot callback can inline ``put``:
    ``if len(queue) < channel.limit: queue.append(row)`` else count a drop in ``dropped[kind]`` (the sink
    sets ``limit`` to 0 when it closes: one check per row covers both)."""

    __slots__ = ("kind", "queue", "limit", "closed", "dropped")

    def __init__(self, kind: str, queue: deque[Any], limit: int, closed: list[bool], dropped: dict[str, int]) -> None:
        self.kind = kind
        self.queue = queue
        self.limit = limit
        self.closed = closed
        self.dropped = dropped

    def put(self, row: Any) -> bool:
        """Enqueue one row; False (and counted) when the queue is full or the sink closed. Never blocks."""
        if len(self.queue) >= self.limit:
            self.dropped[self.kind] += 1
            return False
        self.queue.append(row)
        return True


class EventSink:
    """Bounded queues of event rows, drained by one thread into one librdkafka producer.

    A *channel* is one queue of one event type with its batch constants (e.g. the emitting client's id);
    several tracers / metrics of a process can share a sink through their own channels. ``put`` never
    blocks and never raises for capacity: it returns False and counts the drop. Every batch of a channel
    carries the same key (its ``client_id`` constant, else the sink's own id), so one emitter's events
    land on one partition in the order they were put: a client's ``running`` is read before its ``closed``.
    """

    def __init__(self, producer_conf: Mapping[str, Any], queue_max: int = 100_000, batch_max: int = 1000,
                 interval_s: float = 0.05, topics: Mapping[str, str] | None = None,
                 name: str = "ykafka-events") -> None:
        from ykafka.transport import new_producer

        conf = dict(SINK_PRODUCER_DEFAULTS)
        conf.update({k: v for k, v in producer_conf.items() if not k.startswith("ykafka.")})
        conf.setdefault("client.id", name)
        # librdkafka's own logs (e.g. "connection refused" while the trace cluster is down) go to Python
        # logging, not straight to the application's stderr
        conf.setdefault("logger", logging.getLogger("ykafka.events.rdkafka"))
        self._producer = new_producer(conf, "events")
        self._topics = dict(events.TOPICS if topics is None else topics)
        self._channels: list[tuple[str, dict[str, Any], deque[Any]]] = []
        self._handles: list[Channel] = []  # given out by channel(): closing sets their limit to 0
        self._key = f"{name}-{uuid.uuid4().hex[:12]}".encode()
        self._default: dict[str, deque[Any]] = {}
        self._max = queue_max
        self._batch_max = batch_max
        self._interval_s = interval_s
        self.enqueued: dict[str, int] = dict.fromkeys(self._topics, 0)
        self.dropped_full: dict[str, int] = dict.fromkeys(self._topics, 0)
        self.dropped_undeliverable: dict[str, int] = dict.fromkeys(self._topics, 0)
        self.delivered: dict[str, int] = dict.fromkeys(self._topics, 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = [False]  # read by every put(): a list cell is cheaper than Event.is_set()
        self._wake = threading.Event()
        for kind in self._topics:
            self._default[kind] = self._add_channel(kind, {})
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _add_channel(self, kind: str, constants: Mapping[str, Any]) -> deque[Any]:
        if kind not in self._topics:
            raise ValueError(f"unknown event type {kind!r}")
        queue: deque[Any] = deque()
        with self._lock:
            self._channels = [*self._channels, (kind, dict(constants), queue)]
        return queue

    def channel(self, kind: str, constants: Mapping[str, Any] | None = None) -> Channel:
        """A new queue whose rows share ``constants`` (trailing fields); ``channel.put(row)`` enqueues."""
        handle = Channel(kind, self._add_channel(kind, constants or {}), self._max, self._closed, self.dropped_full)
        with self._lock:
            self._handles.append(handle)
            if self._closed[0]:
                handle.limit = 0
        return handle

    # --- hot path --------------------------------------------------------------------------------

    def put(self, kind: str, row: Any) -> bool:
        """Enqueue one full positional row of event type ``kind``; False (and counted) when full or closed."""
        queue = self._default[kind]
        if len(queue) >= self._max or self._closed[0]:
            self.dropped_full[kind] += 1
            return False
        queue.append(row)
        return True

    # --- background ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval_s)
            self._wake.clear()
            try:
                self._drain()
                self._producer.poll(0)
            except Exception:  # never let the thread die: tracing must degrade, not break
                log.exception("ykafka.events.drain_failed")
        self._drain()

    def _drain(self) -> int:
        sent = 0
        for kind, constants, queue in self._channels:
            topic = self._topics[kind]
            key = str(constants["client_id"]).encode() if constants.get("client_id") else self._key
            popleft = queue.popleft
            while queue:
                # C-level pops (no Python frame per event); only this thread takes from the left
                batch = list(starmap(popleft, repeat((), min(len(queue), self._batch_max))))
                count = len(batch)
                self.enqueued[kind] += count
                value = events.encode_rows(kind, batch, constants)
                try:
                    self._producer.produce(topic, value, key, on_delivery=self._on_delivery(kind, count))
                except BufferError:
                    self.dropped_undeliverable[kind] += count
                    self._producer.poll(0)
                    continue
                except Exception as exc:
                    self.dropped_undeliverable[kind] += count
                    log.warning("ykafka.events.produce_failed", topic=topic, error=str(exc))
                    continue
                sent += count
        return sent

    def _on_delivery(self, kind: str, count: int) -> Callable[[Any, Any], None]:
        def done(err: Any, _msg: Any) -> None:
            if err is None:
                self.delivered[kind] += count
            else:
                self.dropped_undeliverable[kind] += count

        return done

    # --- control ---------------------------------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> int:
        """Wait until queued events are delivered (or dropped); returns batches still in flight."""
        deadline = time.monotonic() + timeout
        while any(q for _k, _c, q in self._channels) and time.monotonic() < deadline and self._thread.is_alive():
            self._wake.set()
            time.sleep(0.01)
        left = self._producer.flush(max(0.0, deadline - time.monotonic()))
        return int(left)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (bounded by ``timeout``), then stop; later puts are dropped and counted."""
        if self._stop.is_set():
            return
        deadline = time.monotonic() + timeout
        self.flush(timeout)
        with self._lock:
            self._closed[0] = True
            for handle in self._handles:
                handle.limit = 0
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=max(0.1, deadline - time.monotonic()))
        self._producer.flush(max(0.0, deadline - time.monotonic()))
        from ykafka.transport import close_producer

        close_producer(self._producer)

    def stats(self) -> dict[str, dict[str, int]]:
        """Per event type: enqueued, delivered, dropped because full, dropped as undeliverable, queued."""
        return {kind: {"enqueued": self.enqueued[kind], "delivered": self.delivered[kind],
                       "dropped_full": self.dropped_full[kind],
                       "dropped_undeliverable": self.dropped_undeliverable[kind],
                       "queued": sum(len(q) for k, _c, q in self._channels if k == kind)} for kind in self._topics}


def sink_conf(rdkafka: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Observability-producer settings from a cluster's librdkafka settings (connection keys only)."""
    keep = ("bootstrap.servers", "metadata.broker.list", "security.protocol", "ssl.", "sasl.",
            "client.dns.lookup", "broker.address.family")
    conf = {k: v for k, v in rdkafka.items() if isinstance(k, str) and k.startswith(keep) and not callable(v)}
    if options and options.get("ykafka.trace.linger.ms") is not None:
        conf["linger.ms"] = options["ykafka.trace.linger.ms"]
    return conf
