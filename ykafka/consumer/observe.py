"""Message trace and handler metrics of the Consumer, through :class:`~ykafka.observability.Observability`.

One :class:`ConsumerObserver` per Consumer owns the client's observability sink (librdkafka statistics,
handler timings, client events, trace events). What it decides per fetched topic (the trace sampling
rate from ``trace.enabled`` / ``trace.sample.rate`` / ``topic.grade``, and the business topic a retry
topic stands for) is resolved once per topic per config version into a :class:`TopicWatch`; the hot
path reads ``watches.get(topic)`` and checks one float per message. Which *messages* are traced is the
producer's decision, re-derived from each message by :meth:`ykafka.tracing.Tracer.trace_message`.

Steps emitted (group, cluster and the fetched partition / offset on each; a retry copy is traced under
its original topic with the retry topic in ``detail``):

* ``consumed``: handed to the handler (framework) or returned by ``poll`` / ``consume`` (drop-in);
  latency = now - the message's timestamp;
* ``processed``: the handler returned; latency = handler time;
* ``retried`` / ``dead-lettered``: the handler raised and a copy went to the retry topic / the DLQ
  (``error``: the exception text, ``detail``: the destination topic).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import structlog

from ykafka.consumer.retry import Routed, parse_retry_topic
from ykafka.events import MetricName
from ykafka.metrics import Metrics
from ykafka.observability import Observability
from ykafka.tracing import Tracer

log = structlog.get_logger(__name__)

CONSUMED = "consumed"
PROCESSED = "processed"
CONSUME_LATENCY = str(MetricName.CONSUME_LATENCY)
PROCESS_LATENCY = str(MetricName.PROCESS_LATENCY)
CONSUME_ERRORS = str(MetricName.CONSUME_ERRORS)


#: Handlers faster than this per message are timed in samples: timing each message would cost more
#: than the handler does (two clock reads, a timestamp, two list appends: ~1 µs).
SAMPLED_TIMING_BELOW_S = 50e-6
#: One message in this many is timed when sampling.
TIMING_STRIDE = 16
#: Handlers faster than this per message (a no-op, a counter) are timed one in ``SPARSE_TIMING_STRIDE``: one timed
#: call in 16 (~0.65 µs) would still cost more than the 15 untimed ones; at such rates the sparser sample is still
#: thousands of timings a second, more than an interval's reservoir keeps.
SPARSE_TIMING_BELOW_S = 1e-6
SPARSE_TIMING_STRIDE = 256


class TopicWatch:
    """What the consumer does for messages fetched from one topic, under the current config version."""

    __slots__ = ("rate", "topic")

    def __init__(self, rate: float, topic: str) -> None:
        self.rate = rate  # trace sampling rate; 0.0: nothing of this topic is traced
        self.topic = topic  # the business topic (the original one for a retry topic): metrics label


class ConsumerObserver:
    """Trace steps and handler metrics of one Consumer (see the module docstring)."""

    def __init__(self, runtime: Any, group: str | None, cluster: str) -> None:
        self.runtime = runtime
        self.group = group
        self.cluster = cluster  # the cluster the consumer reads (trace events name it); follows route switches
        self.obs = Observability(runtime, "consumer", group=group)
        self.metrics: Metrics | None = self.obs.metrics
        #: fetched topic -> TopicWatch; cleared when the runtime's version moves (read without a lock)
        self.watches: dict[str, TopicWatch] = {}
        self._tracer: Tracer | None = None

    # -- resolution (once per topic per config version) ----------------------------------------------------

    def rdkafka_settings(self) -> dict[str, Any]:
        """Statistics settings for the librdkafka consumer (lag, received messages, receive errors)."""
        return self.obs.rdkafka_settings()

    def invalidate(self) -> None:
        """Hot config or grant moved: resolve every topic again on its next message."""
        self.watches.clear()

    def watch(self, topic: str) -> TopicWatch:
        """The topic's :class:`TopicWatch`, resolved now (the hot path calls this only on a cache miss)."""
        runtime = self.runtime
        version = runtime.version
        original = topic
        if self.group:
            parsed = parse_retry_topic(self.group, topic)
            if parsed is not None:
                original = parsed[0]  # a retry copy follows its original topic's trace settings
        rate = 0.0
        try:
            runtime.subscribe(topic=original, group=self.group, cluster=self.cluster)
            rate = Tracer.rate(runtime.effective(topic=original, group=self.group, cluster=self.cluster))
        except Exception as exc:  # tracing must never stop consumption: off for this topic until next change
            log.warning("ykafka.consumer.trace_config_failed", topic=original, error=str(exc))
        if rate > 0.0 and not self.tracer().active:
            rate = 0.0
        watch = TopicWatch(rate, original)
        if runtime.version == version:  # else a change raced this resolution: resolve again next time
            self.watches[topic] = watch
        return watch

    def tracer(self) -> Tracer:
        """The client's tracer, created (with its sink) only once some topic asks for tracing."""
        tracer = self._tracer
        if tracer is None:
            tracer = self._tracer = self.obs.tracer()
        return tracer

    def timing(self, topic: str, group: str | None, cost_s: float | None) -> TaskTiming | None:
        """How the handler calls of a task fetched from ``topic`` are timed: every message (traced when the
        topic's rate asks for it), one in ``TIMING_STRIDE`` (``cost_s``, the handler's seconds a message, under
        ``SAMPLED_TIMING_BELOW_S``: a handler cheaper than the timing, with nothing traced) or in
        ``SPARSE_TIMING_STRIDE`` (under ``SPARSE_TIMING_BELOW_S``), or not at all (None: no metrics, no trace).
        ``cost_s`` None: time every message (retry copies)."""
        watch = self.watches.get(topic) or self.watch(topic)
        if watch.rate:
            return TaskTiming(self, watch.rate, watch.topic, group, 1)
        if self.metrics is None:
            return None
        stride = 1 if cost_s is None or cost_s >= SAMPLED_TIMING_BELOW_S else \
            SPARSE_TIMING_STRIDE if cost_s < SPARSE_TIMING_BELOW_S else TIMING_STRIDE
        return TaskTiming(self, 0.0, watch.topic, group, stride)

    # -- steps ------------------------------------------------------------------------------------------

    def trace(self, kind: str, msg: Any, rate: float, *, latency_ms: float | None = None, error: Any = None,
              detail: str | None = None) -> bool:
        """Emit one step of a fetched message if the producer's sampling decision says so."""
        return self.tracer().trace_message(kind, msg, rate=rate, group=self.group, latency_ms=latency_ms,
                                           error=error, detail=detail, cluster=self.cluster)

    def consumed(self, msg: Any, rate: float) -> bool:
        """``consumed`` with latency = now - the message's timestamp (None without a timestamp)."""
        return self.trace(CONSUMED, msg, rate, latency_ms=age_ms(msg))

    def polled(self, msgs: list[Any]) -> None:
        """Drop-in ``consume()``: ``consumed`` for the sampled messages of a batch (errors skipped)."""
        watches = self.watches
        for msg in msgs:
            if msg.error() is not None:
                continue
            topic = msg.topic()
            watch = watches.get(topic) or self.watch(topic)
            if watch.rate:
                self.consumed(msg, watch.rate)

    # -- life cycle -------------------------------------------------------------------------------------

    def stats(self) -> Mapping[str, Any]:
        """Trace events of this consumer (enqueued / delivered / dropped), {} when tracing never started."""
        return self._tracer.stats() if self._tracer is not None else {}

    def close(self, timeout: float = 2.0) -> None:
        """Last metrics interval, a last client event (``closed``), then what is queued goes out (bounded)."""
        self.obs.close(timeout)


class TaskTiming:
    """The timings and trace steps of one task's timed messages (the first of each ``stride``), handed to the
    metrics once per task (one lock, not two per message). A sample (``stride`` > 1) stands for every message:
    counts and the handler's total time stay exact, percentiles and max come from the timed ones."""

    __slots__ = ("_to_wall_ms", "ages", "group", "observer", "rate", "stride", "took", "topic")

    def __init__(self, observer: ConsumerObserver, rate: float, topic: str, group: str | None, stride: int) -> None:
        self.observer = observer
        self.rate = rate  # trace sampling rate of the topic; 0.0: nothing traced
        self.topic = topic
        self.group = group
        self.stride = stride
        self.ages: list[float] = []  # ms from each timed message's timestamp to its handler call
        self.took: list[float] = []  # ms in the handler, per timed message
        self._to_wall_ms = time.time() * 1000 - time.perf_counter() * 1000  # wall ms = this + perf_counter() ms

    def consumed(self, raw: Any, now: float) -> None:
        """A timed message is handed to the handler (``now``: perf_counter seconds, the previous one's end)."""
        ts_type, ts = raw.timestamp()
        age = self._to_wall_ms + now * 1000 - ts if ts_type and ts > 0 else None
        if age is not None:
            self.ages.append(age)
        if self.rate:
            self.observer.trace(CONSUMED, raw, self.rate, latency_ms=age)

    def processed(self, raw: Any, took_s: float) -> None:
        self.took.append(took_s * 1000)
        if self.rate:
            self.observer.trace(PROCESSED, raw, self.rate, latency_ms=took_s * 1000)

    def failed(self, raw: Any, took_s: float, routed: Routed | None) -> None:
        """The handler raised; ``routed``: where the copy went (retry topic / DLQ), None when nowhere."""
        self.took.append(took_s * 1000)
        if self.rate and routed is not None:
            self.observer.trace(routed[0], raw, self.rate, error=routed[2], detail=routed[1])

    def finish(self, count: int, spent_s: float, errors: int) -> None:
        """Hand the task's ``count`` messages to the metrics: handler time ``spent_s`` in all, ``errors``."""
        metrics = self.observer.metrics
        timed = len(self.took)
        if metrics is None or not timed:
            return
        metrics.observe_many(PROCESS_LATENCY, self.took, self.topic, self.group, count=count, total=spent_s * 1000)
        ages = self.ages
        if ages:  # messages without a timestamp have no age: scale the count by the timed share of those
            metrics.observe_many(CONSUME_LATENCY, ages, self.topic, self.group, count=round(len(ages) * count / timed),
                                 total=sum(ages) * count / timed)
        if errors:
            metrics.count(CONSUME_ERRORS, errors, self.topic, self.group)


def age_ms(msg: Any) -> float | None:
    """Milliseconds since the message's timestamp (None when it has none)."""
    ts_type, ts = msg.timestamp()
    if not ts_type or ts <= 0:
        return None
    return time.time() * 1000 - ts
