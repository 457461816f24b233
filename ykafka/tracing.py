"""Message trace: lifecycle events of sampled messages, shipped off the hot path to ``__ykafka_trace``.

The hot path only decides and enqueues: an emit appends one tuple to a bounded in-memory queue (a few
hundred nanoseconds). A background thread drains the queues in batches into a dedicated librdkafka
producer that writes :mod:`ykafka.events` batches. When a queue is full, or the trace cluster is
unreachable long enough for the trace producer's own queue to fill or its messages to time out, events
are *dropped and counted* (:meth:`EventSink.stats`): business sends never wait for tracing.

Sampling is decided once per message, where it is produced (:meth:`Tracer.sample`), and every consumer
of every group re-derives the same decision from the message itself, so all lifecycle events of a
sampled message are kept and the pipeline's completeness audit is exact on the sampled subset:

* a message with a ``ykafka-id`` (stamped by the Producer) is traced when a hash of that id falls under
  the rate; the id is the correlation id;
* otherwise the producer decides with one ``random()`` and marks a sampled message with the header
  ``ykafka-trace: <new id>``; at rate 1.0 it adds nothing and the message is identified by its
  coordinates ``topic/partition/offset`` once acknowledged;
* a consumer traces messages carrying ``ykafka-trace``, and header-less messages whose *original*
  coordinates hash under its rate (every group computes the same).

An unsampled message costs one ``random()`` at the producer: no id, no header, no callback.

Hook API for the Producer / Consumer::

    tracer = Tracer.for_client(client_id, ip, {"bootstrap.servers": ...}, app=app_id, cluster="dc-a")
    rate = tracer.rate(effective)                   # per topic, once per config version (0.0 = off)
    mid = tracer.sample(rate, msg_id)               # per message; None = not traced; msg_id = its ykafka-id
    if mid is not None:
        if mid and msg_id is None:
            headers.append(("ykafka-trace", mid))
        on_delivery = tracer.wrap_delivery(on_delivery, topic, key, mid)   # emits produced + acked / failed
    tracer.trace_message("consumed", msg, rate=rate, group="g1", latency_ms=...)   # consumer side
    tracer.emit("spilled", topic=..., msg_id=...)   # any other step
    tracer.close()
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import random
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from ykafka import catalog, events
from ykafka import headers as H
from ykafka.sink import Channel, EventSink

log = structlog.get_logger(__name__)

_TRACE_KEYS = ("trace.enabled", "trace.sample.rate", "topic.grade")
_SCALE = 1 << 32


_ID_PREFIX = os.urandom(6).hex()
_ID_COUNTER = itertools.count()


def new_message_id() -> str:
    """A process-unique, globally unlikely-to-collide message id (random prefix + counter)."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):x}"


def _text(value: Any) -> str | None:
    if value is None or type(value) is str:
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def header_text(headers: Any, name: str) -> str | None:
    """The last value of header ``name`` as text (list of pairs or dict; None when absent)."""
    found = None
    if headers:
        items = headers.items() if isinstance(headers, dict) else headers
        for key, value in items:
            if key == name:
                found = value
    return _text(found)


class Tracer:
    """Emits trace events for sampled messages of one client (see the module docstring)."""

    def __init__(self, sink: EventSink | None, client_id: str, app: str = "", ip: str = "",
                 cluster: str = "", own_sink: bool = True) -> None:
        self.sink = sink
        self.client_id = client_id
        self.app = app
        self.ip = ip
        self.cluster = cluster
        self._own_sink = own_sink
        self._shared: dict[Any, Callable[[Any, Any], None]] = {}
        self._put: Callable[[Any], bool] | None = None
        self._channel: Channel | None = None
        if sink is not None:
            self._channel = sink.channel("trace", {"client_id": client_id, "app": app, "ip": ip})
            self._put = self._channel.put

    @classmethod
    def for_client(cls, client_id: str, ip: str, producer_conf: Mapping[str, Any] | None, *, app: str = "",
                   cluster: str = "", queue_max: int = 100_000, sink: EventSink | None = None) -> Tracer:
        """A tracer writing through ``sink``, or through a new sink on ``producer_conf`` (None: disabled)."""
        own = sink is None
        if sink is None and producer_conf:
            sink = EventSink(producer_conf, queue_max=queue_max, name=f"ykafka-trace-{client_id}")
        return cls(sink, client_id, app, ip, cluster, own_sink=own)

    @classmethod
    def disabled(cls) -> Tracer:
        return cls(None, "")

    @property
    def active(self) -> bool:
        """False for a disabled or closed tracer (every emit would be a no-op)."""
        return self._put is not None

    # --- decisions -------------------------------------------------------------------------------

    @staticmethod
    def rate(effective: Mapping[str, Any]) -> float:
        """The sampling rate an effective config asks for (0.0 when trace is off). Grade defaults apply
        when the mapping comes straight from a namespace rather than from ``catalog.resolve``."""
        if "trace.enabled" not in effective or "trace.sample.rate" not in effective:
            effective = catalog.resolve([effective], _TRACE_KEYS)
        if not effective.get("trace.enabled"):
            return 0.0
        return float(effective.get("trace.sample.rate") or 0.0)

    def enabled_for(self, effective: Mapping[str, Any]) -> bool:
        """Whether messages of a topic with this effective config may be traced at all."""
        return self._put is not None and self.rate(effective) > 0.0

    def sample(self, rate: float, msg_id: str | None = None) -> str | None:
        """Producer side, once per message: None when not traced, else the correlation id to trace it
        under: ``msg_id`` (its ``ykafka-id``, decided by hash), a new id to put in the ``ykafka-trace``
        header, or ``""`` at rate 1.0 without ``msg_id`` (identified by its coordinates once acked)."""
        if rate <= 0.0 or self._put is None:
            return None
        if msg_id is not None:
            return msg_id if self.sampled(msg_id, rate) else None
        if rate >= 1.0:
            return ""
        return new_message_id() if _random() < rate else None

    @staticmethod
    def sampled(msg_id: str | bytes | None, rate: float) -> bool:
        """Deterministic per id: the same answer in every process for the same id and rate."""
        if rate >= 1.0:
            return True
        if rate <= 0.0 or not msg_id:
            return False
        raw = msg_id if type(msg_id) is bytes else str(msg_id).encode()
        return zlib.crc32(raw) < rate * _SCALE

    # --- emitting --------------------------------------------------------------------------------

    def produced(self, topic: str, key: Any, msg_id: str, cluster: str | None = None) -> bool:
        """The message was handed to the producer, on paths without a :meth:`wrap_delivery` callback."""
        put = self._put
        if put is None:
            return False
        if key is not None and type(key) is not str:
            key = _text(key)
        return put((int(_time() * 1000), "produced", msg_id, topic, key, None, None, None, None, None, None, None,
                    None, cluster or self.cluster))

    def wrap_delivery(self, callback: Callable[[Any, Any], None] | None, topic: str, key: Any, msg_id: str,
                      cluster: str | None = None) -> Callable[[Any, Any], None]:
        """A delivery callback for a sampled message: emits ``acked`` (partition, offset, latency, and the
        send time from which readers derive ``produced``) or ``failed``, then calls ``callback``.

        With ``msg_id == ""`` (rate 1.0, no ``ykafka-id``) everything comes from the delivered message and
        one shared callback per user callback is returned: no per-message object at all. Otherwise a
        ``partial``, not a closure: it lives until the broker answers, and fewer GC-tracked objects per
        in-flight message keep the collector cheap."""
        where = cluster or self.cluster
        if not msg_id:
            cache_key = (callback, where, topic)
            shared = self._shared.get(cache_key)
            if shared is None:
                if len(self._shared) > 256:
                    self._shared.clear()
                shared = self._shared[cache_key] = self._by_coordinates(callback, where, topic)
            return shared
        if key is not None and type(key) is not str:
            key = _text(key)
        return functools.partial(self._delivered, callback, topic, key, msg_id, where)

    def _delivered(self, callback: Callable[[Any, Any], None] | None, topic: str, key: str | None, msg_id: str,
                   where: str, err: Any, msg: Any) -> None:
        put = self._put
        if put is not None:
            now = int(_time() * 1000)
            latency = msg.latency()
            latency_ms = None if latency is None else latency * 1000
            sent = now if latency is None else now - int(latency * 1000)
            if err is None:
                put((now, "acked", msg_id, topic, key, msg.partition(), msg.offset(), msg.timestamp()[1],
                     latency_ms, None, None, None, None, where, sent))
            else:
                put((now, "failed", msg_id, topic, key, None, None, None, latency_ms, None, None, str(err), None,
                     where, sent))
        if callback is not None:
            callback(err, msg)

    def _by_coordinates(self, callback: Callable[[Any, Any], None] | None, where: str,
                        topic: str) -> Callable[[Any, Any], None]:
        """The shared delivery callback of rate 1.0 without message ids: the message is identified by its
        coordinates once acked (readers fill a null ``msg_id`` with ``topic/partition/offset``, see
        :func:`ykafka.events.decode`). A plain closure built once per user callback, cluster and topic (the
        topic every message it reports was sent to): the cheapest call per message.

        It offers a *fused twin* (``trace.direct_twin(failed)``) to the disaster-recovery engine's direct
        path for sends without a key (:meth:`ykafka.dr.link.DirectSender.shared`): one frame that traces
        and reports a success itself (reading no key: there is none) and hands a failure to
        ``failed(trace, -1, err, msg)``, which re-routes it or reports it through ``trace`` in the end,
        instead of the engine's report frame calling this one. Sends given to the twin carry neither a key
        nor their own timestamp, so their message timestamp is their send time and their row needs no clock
        read (see :func:`ykafka.events.derive_times`)."""
        channel = self._channel
        if self._put is None or channel is None:
            return callback or _ignore
        now_s, floor = _time, math.floor
        queue, dropped = channel.queue, channel.dropped
        append = queue.append
        user = callback or _ignore
        # the acked row's constant runs as one element each: kind, msg_id, topic (and a null key, the common
        # case: one element less to build and encode) / group .. cluster
        acked, acked_no_key = events.spread(("acked", None, topic)), events.spread(("acked", None, topic, None))
        # a keyless send's acked row without its times (null ts and sent_ts): see direct_twin
        acked_at_send = events.spread((None, "acked", None, topic, None))
        constant = events.spread((None, None, None, None, where))

        def plain(err: Any, msg: Any) -> None:  # one frame per message: Channel.put inlined
            if err is not None:
                failure(err, msg)
                return
            if len(queue) >= channel.limit:  # full, or the sink closed
                dropped["trace"] += 1
            else:
                # epoch ms (float constants: no int-to-float conversion); ts - latency: when it was handed to
                # the producer (floor = int() here, without a type call)
                now = now_s() * 1000.0
                latency = (msg.latency() or 0.0) * 1000.0
                key = msg.key()
                append((floor(now), acked, None if key is None else key.decode("utf-8", "replace")
                        if type(key) is bytes else _text(key), msg.partition(), msg.offset(), msg.timestamp()[1],
                        latency, constant, floor(now - latency)))
            user(None, msg)

        def failure(err: Any, msg: Any) -> None:
            if len(queue) < channel.limit:
                now = now_s() * 1000.0
                latency = (msg.latency() or 0.0) * 1000.0
                append((floor(now), "failed", new_message_id(), topic, _text(msg.key()), None, None, None, latency,
                        None, None, str(err), None, where, floor(now - latency)))
            else:
                dropped["trace"] += 1
            user(err, msg)

        def direct_twin(failed: Callable[[Any, int, Any, Any], None]) -> Callable[[Any, Any], None]:
            def keyless(err: Any, msg: Any) -> None:  # DirectSender.shared's sends have no key: none to read
                if err is not None:  # the engine re-routes it, or reports it through plain in the end
                    failed(plain, -1, err, msg)
                    return
                if len(queue) >= channel.limit:
                    dropped["trace"] += 1
                else:
                    ts_type, msg_ts = msg.timestamp()
                    if ts_type == 1:  # TIMESTAMP_CREATE_TIME: librdkafka's clock at produce(), as no send
                        # given to the twin carries its own timestamp: readers take the send time from
                        # msg_ts and the ack time from msg_ts + latency (events.derive_times): no clock read
                        append((acked_at_send, msg.partition(), msg.offset(), msg_ts,
                                (msg.latency() or 0.0) * 1000.0, constant))
                    else:  # the topic stamps log-append time: the broker's, not the send's
                        now = now_s() * 1000.0
                        latency = (msg.latency() or 0.0) * 1000.0
                        append((floor(now), acked_no_key, msg.partition(), msg.offset(), msg_ts, latency,
                                constant, floor(now - latency)))
                user(None, msg)

            return keyless

        plain.direct_twin = direct_twin  # type: ignore[attr-defined]
        return plain

    def emit(self, kind: str, *, topic: str, key: Any = None, msg_id: Any = None, partition: int | None = None,
             offset: int | None = None, msg_ts: int | None = None, latency_ms: float | None = None,
             group: str | None = None, attempt: int | None = None, error: Any = None,
             cluster: str | None = None, detail: str | None = None, ts: int | None = None) -> bool:
        """Queue one event (no sampling decision here: call it for sampled messages). Never blocks."""
        put = self._put
        if put is None:
            return False
        if type(key) is not str and key is not None:
            key = _text(key)
        if type(msg_id) is not str and msg_id is not None:
            msg_id = _text(msg_id)
        return put((
            ts or int(_time() * 1000), kind, msg_id, topic, key, partition, offset, msg_ts, latency_ms, group,
            attempt, None if error is None else str(error), detail, cluster or self.cluster))

    def trace_id(self, msg: Any, rate: float, headers: Any = None) -> str | None:
        """Consumer side: the correlation id of a consumed message if it is to be traced, else None
        (the same decision the producer made; see the module docstring). ``headers``: ``msg.headers()``
        when the caller has it already (each call builds a new list)."""
        if rate <= 0.0 or self._put is None:
            return None
        if headers is None:
            headers = msg.headers()
        found = header_text(headers, H.TRACE_ID)
        if found:
            return found
        stamped = header_text(headers, H.MESSAGE_ID)
        if stamped:
            return stamped if self.sampled(stamped, rate) else None
        topic = header_text(headers, H.ORIGINAL_TOPIC) or msg.topic()
        partition = header_text(headers, H.ORIGINAL_PARTITION) or msg.partition()
        offset = header_text(headers, H.ORIGINAL_OFFSET) or msg.offset()
        coordinates = f"{topic}/{partition}/{offset}"
        return coordinates if self.sampled(coordinates, rate) else None

    def trace_message(self, kind: str, msg: Any, effective: Mapping[str, Any] | None = None, *,
                      rate: float | None = None, group: str | None = None, latency_ms: float | None = None,
                      error: Any = None, detail: str | None = None, cluster: str | None = None) -> bool:
        """Consumer side: trace a confluent-kafka ``Message`` if :meth:`trace_id` says so.

        Retry copies are traced under their original topic (``ykafka-original-topic``) with the retry
        topic in ``detail``, and audited in their original message's time bucket.
        """
        if self._put is None:
            return False
        if rate is None:
            rate = self.rate(effective or {})
        if rate <= 0.0:
            return False
        headers = msg.headers()
        msg_id = self.trace_id(msg, rate, headers)
        if msg_id is None:
            return False
        topic = msg.topic()
        original = header_text(headers, H.ORIGINAL_TOPIC)
        if original and original != topic:
            detail = detail or topic
            topic = original
        attempt = header_text(headers, H.ATTEMPT)
        ts_type, ts_value = msg.timestamp()
        msg_ts = ts_value if ts_type else None
        original_ts = header_text(headers, H.ORIGINAL_TIMESTAMP)
        if original_ts and original_ts.isdigit():
            msg_ts = int(original_ts)
        return self.emit(kind, topic=topic, key=msg.key(), msg_id=msg_id, partition=msg.partition(),
                         offset=msg.offset(), msg_ts=msg_ts, latency_ms=latency_ms, group=group,
                         attempt=int(attempt) if attempt and attempt.isdigit() else None, error=error,
                         cluster=cluster, detail=detail)

    # --- life cycle ------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        if self.sink is None:
            return {}
        return self.sink.stats()["trace"]

    def flush(self, timeout: float = 10.0) -> int:
        return 0 if self.sink is None else self.sink.flush(timeout)

    def close(self, timeout: float = 5.0) -> None:
        if self.sink is not None and self._own_sink:
            self.sink.close(timeout)
        self._put = None


_random = random.random
_time = time.time


def _ignore(err: Any, msg: Any) -> None:
    """Delivery callback of a closed tracer without a user callback."""
