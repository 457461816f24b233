"""The ykafka Consumer's observability on a real broker: trace steps per message, handler metrics, lag, client
events; the drop-in poll / consume path; nothing traced when trace is off.

Messages are produced by the ykafka Producer with ``trace.sample.rate=1.0`` (no header: each message is
identified by its coordinates ``topic/partition/offset``), so every step of every message is expected and
the consumer's events must correlate with the producer's by that id.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import KafkaError, Message, TopicPartition
from confluent_kafka import Producer as RawProducer

from tests.consumer_fixtures import consumer_config, create_topic, read_all, unique, wait_until
from ykafka import Producer, events
from ykafka import headers as H
from ykafka.catalog import Scope, ScopeKind
from ykafka.consumer import Consumer, dlq_topic, retry_topic
from ykafka.consumer.observe import SAMPLED_TIMING_BELOW_S
from ykafka.events import KIND_ORDER, MetricName

TRACE_ON = {"trace.enabled": True, "trace.sample.rate": 1.0}
CONSUMER_STEPS = ("consumed", "processed", "retried", "dead-lettered")


def produce_traced(bootstrap: str, topic: str, keys: list[str], partitions: int = 1) -> dict[str, tuple[int, int]]:
    """Send one message per key through the ykafka Producer (trace rate 1.0), key i to partition
    i % partitions, one record per batch (Tansu's high watermark is exact then); key -> (partition, offset)."""
    where: dict[str, tuple[int, int]] = {}

    def delivered(err: Any, msg: Message) -> None:
        assert err is None, err
        where[msg.key().decode()] = (msg.partition(), msg.offset())

    producer = Producer({"bootstrap.servers": bootstrap, "ykafka.metrics.enabled": False, "linger.ms": 5,
                         "ykafka.trace.linger.ms": 20, **TRACE_ON})
    for i, key in enumerate(keys):
        producer.produce(topic, f"v-{key}".encode(), key.encode(), partition=i % partitions, on_delivery=delivered)
        assert producer.flush(15) == 0
    producer.close()
    assert len(where) == len(keys)
    return where


def collect(bootstrap: str, topic: str, match: Callable[[dict[str, Any]], bool],
            done: Callable[[list[dict[str, Any]]], bool], timeout: float = 20.0) -> list[dict[str, Any]]:
    """Decoded events of an event topic that ``match``, read from the start until ``done(found)`` (or timeout)."""
    raw = RawConsumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "auto.offset.reset": "earliest",
                       "enable.auto.commit": False, "session.timeout.ms": 6000, "log_level": 3})
    found: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + timeout
        meta = None
        while meta is None and time.monotonic() < deadline:
            meta = raw.list_topics(topic, timeout=5).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                meta = None
                time.sleep(0.1)
        assert meta is not None, f"{topic} does not exist"
        raw.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        while not done(found) and time.monotonic() < deadline:
            for msg in raw.consume(1000, 0.3):
                if msg.error() is None:
                    found.extend(e for _kind, e in events.iter_events(iter([msg.value()])) if match(e))
                elif msg.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(str(msg.error()))
        # whatever else is already there (a duplicate would show up here)
        for msg in raw.consume(1000, 0.5):
            if msg.error() is None:
                found.extend(e for _kind, e in events.iter_events(iter([msg.value()])) if match(e))
    finally:
        raw.close()
    return found


def steps_by_id(trace: list[dict[str, Any]]) -> dict[str, list[tuple[Any, ...]]]:
    """Consumer steps per message id, in order: (kind, group, partition, offset, detail, attempt)."""
    out: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for e in sorted(trace, key=lambda e: (e["ts"], KIND_ORDER[e["kind"]])):
        if e["kind"] in CONSUMER_STEPS:
            out[e["msg_id"]].append((e["kind"], e["group"], e["partition"], e["offset"], e["detail"], e["attempt"]))
    return out


def test_handler_steps_retry_dlq_metrics_and_client_events(obs_broker, running, tmp_path: Path) -> None:
    bs = obs_broker.bootstrap
    topic, group, client_id = unique("traced"), unique("g-trace"), unique("consumer")
    create_topic(bs, topic, 2)
    keys = [f"k{i}" for i in range(10)]
    where = produce_traced(bs, topic, keys, partitions=2)
    retry1, dlq = retry_topic(group, topic, 1), dlq_topic(group, topic)

    def handle(msg: Message) -> None:
        key = msg.key().decode()
        attempt = H.get_int(msg.headers(), H.ATTEMPT) or 0
        if key == "k5":
            time.sleep(0.03)  # a measurably slow handler
        if key == "k7" or (key == "k3" and attempt == 0):
            raise RuntimeError(f"boom {key}")

    consumer = Consumer(consumer_config(bs, group, tmp_path, **{
        **TRACE_ON, "ykafka.client.id": client_id, "ykafka.metrics.interval.ms": 200, "ykafka.trace.linger.ms": 20,
        "consumer.retry.backoff.ms": "300", "consumer.retry.max.attempts": 1, "consumer.workers": 2}))
    job = running(consumer, handle, [topic])
    wait_until(lambda: consumer.engine.processed >= len(keys) + 2 and consumer.engine.router is not None
               and consumer.engine.router.sent_dlq == 1, 60, message="every message handled, k7 dead-lettered")
    metrics = consumer.observer.metrics
    assert metrics is not None
    # the statistics report lag 0 on both partitions once the offsets are committed
    wait_until(lambda: all(metrics.last_lag.get((topic, p), (-1,))[0] == 0 for p in (0, 1)), 20,
               message="lag 0 in the statistics")
    watches = consumer.observer.watches
    assert (watches[topic].rate, watches[topic].topic) == (1.0, topic)
    assert (watches[retry1].rate, watches[retry1].topic) == (1.0, topic)  # a retry copy follows its original
    job.stop()
    consumer.close()

    copies = {m.key().decode(): (m.partition(), m.offset()) for m in read_all(bs, retry1, 2)}
    assert sorted(copies) == ["k3", "k7"]
    assert [m.key() for m in read_all(bs, dlq, 1)] == [b"k7"]

    # --- the trace: every step of every message, correlated with the producer's by its coordinates ------
    ids = {key: f"{topic}/{p}/{o}" for key, (p, o) in where.items()}
    total = 2 * len(keys) + 2 * len(keys) + 4  # produced + acked; consumed + processed; 2 retried + 2 copies
    trace = collect(bs, events.TRACE_TOPIC, lambda e: e["topic"] == topic, lambda found: len(found) >= total)
    assert sorted(e["msg_id"] for e in trace if e["kind"] == "acked") == sorted(ids.values())
    steps = steps_by_id(trace)
    assert set(steps) == set(ids.values())
    for key in keys:
        p, o = where[key]
        consumed = ("consumed", group, p, o, None, None)
        if key == "k3":
            cp, co = copies[key]
            expected = [consumed, ("retried", group, p, o, retry1, None),
                        ("consumed", group, cp, co, retry1, 1), ("processed", group, cp, co, retry1, 1)]
        elif key == "k7":
            cp, co = copies[key]
            expected = [consumed, ("retried", group, p, o, retry1, None),
                        ("consumed", group, cp, co, retry1, 1), ("dead-lettered", group, cp, co, dlq, 1)]
        else:
            expected = [consumed, ("processed", group, p, o, None, None)]
        assert steps[ids[key]] == expected, key
    mine = [e for e in trace if e["kind"] in CONSUMER_STEPS]
    assert len(mine) == 2 * len(keys) + 4
    assert sum(e["kind"] == "consumed" for e in mine) == len(keys) + 2  # N + the two retry copies
    assert all(e["client_id"] == client_id and e["cluster"] == "default" for e in mine)
    assert {e["error"] for e in mine if e["kind"] in ("retried", "dead-lettered")} == {
        "RuntimeError: boom k3", "RuntimeError: boom k7"}
    assert all(e["error"] is None for e in mine if e["kind"] in ("consumed", "processed"))
    assert all(e["latency_ms"] is not None and 0 <= e["latency_ms"] < 60_000 for e in mine
               if e["kind"] == "consumed")
    slow = [e for e in mine if e["kind"] == "processed" and e["key"] == "k5"]
    assert len(slow) == 1 and slow[0]["latency_ms"] >= 30.0
    copy_consumed = [e for e in mine if e["kind"] == "consumed" and e["detail"] == retry1]
    assert all(e["msg_ts"] is not None and e["msg_ts"] == next(a["msg_ts"] for a in trace if a["kind"] == "acked"
                                                                and a["msg_id"] == e["msg_id"]) for e in copy_consumed)

    # --- metrics: handler timings and errors per interval, lag from the statistics ----------------------
    def mine_metric(e: dict[str, Any]) -> bool:
        return e["client_id"] == client_id

    def timed(found: list[dict[str, Any]], name: str) -> int:
        return sum(e["count"] for e in found if e["name"] == name)

    handled = len(keys) + 2  # every handler call: N originals and the two retry copies
    metric_events = collect(bs, events.METRICS_TOPIC, mine_metric,
                            lambda found: timed(found, MetricName.PROCESS_LATENCY) >= handled
                            and timed(found, MetricName.CONSUME_ERRORS) >= 3)
    process = [e for e in metric_events if e["name"] == MetricName.PROCESS_LATENCY]
    assert {(e["topic"], e["group"]) for e in process} == {(topic, group)}
    assert timed(metric_events, MetricName.PROCESS_LATENCY) == handled
    assert max(e["max"] for e in process) >= 30.0  # the slow k5
    assert timed(metric_events, MetricName.CONSUME_LATENCY) == handled
    errors = [e for e in metric_events if e["name"] == MetricName.CONSUME_ERRORS and e["topic"] == topic]
    assert sum(e["count"] for e in errors) == 3 and {e["group"] for e in errors} == {group}  # k3, k7, k7's copy
    lag = [e for e in metric_events if e["name"] == MetricName.LAG and e["topic"] == topic]
    assert {e["partition"] for e in lag} == {0, 1} and all(e["group"] == group for e in lag)
    assert {e["partition"]: e["end_offset"] for e in lag if e["value"] == 0} == {
        p: max(o for q, o in where.values() if q == p) + 1 for p in {q for q, _ in where.values()}}

    # --- client events: who consumed, and that it closed --------------------------------------------------
    clients = collect(bs, events.CLIENTS_TOPIC, lambda e: e["client_id"] == client_id,
                      lambda found: any(c["state"] == "closed" for c in found))
    clients.sort(key=lambda c: c["ts"])
    assert clients[-1]["state"] == "closed"
    assert all(c["role"] == "consumer" and c["group"] == group for c in clients)
    assert topic in clients[-1]["topics"].split(",")


def test_trace_off_emits_no_consumer_step_but_metrics(obs_broker, running, tmp_path: Path) -> None:
    bs = obs_broker.bootstrap
    topic, group, client_id = unique("untraced"), unique("g-off"), unique("consumer")
    create_topic(bs, topic, 1)
    keys = [f"k{i}" for i in range(6)]
    where = produce_traced(bs, topic, keys)  # the producer traces them: only the consumer is off
    failing = {"k2"}

    def handle(msg: Message) -> None:
        if msg.key().decode() in failing and not H.get_int(msg.headers(), H.ATTEMPT):
            raise ValueError("once")

    consumer = Consumer(consumer_config(bs, group, tmp_path, **{
        "ykafka.client.id": client_id, "ykafka.metrics.interval.ms": 200, "trace.enabled": False,
        "consumer.retry.backoff.ms": "100", "consumer.retry.max.attempts": 1}))
    job = running(consumer, handle, [topic])
    wait_until(lambda: consumer.engine.processed >= len(keys) + 1, 60, message="every message handled")
    assert consumer.observer.watches[topic].rate == 0.0
    assert consumer.observer._tracer is None  # no tracer was ever asked for
    job.stop()
    consumer.close()

    trace = collect(bs, events.TRACE_TOPIC, lambda e: e["topic"] == topic,
                    lambda found: sum(e["kind"] == "acked" for e in found) >= len(keys), timeout=15)
    assert sorted(e["msg_id"] for e in trace if e["kind"] == "acked") == sorted(
        f"{topic}/{p}/{o}" for p, o in where.values())
    assert [e for e in trace if e["kind"] in CONSUMER_STEPS] == []
    metric_events = collect(bs, events.METRICS_TOPIC, lambda e: e["client_id"] == client_id,
                            lambda found: sum(e["count"] for e in found
                                              if e["name"] == MetricName.PROCESS_LATENCY) >= len(keys) + 1)
    assert sum(e["count"] for e in metric_events if e["name"] == MetricName.PROCESS_LATENCY) == len(keys) + 1
    assert sum(e["count"] for e in metric_events if e["name"] == MetricName.CONSUME_ERRORS
               and e["topic"] == topic) == 1


def test_dropin_poll_and_consume_trace_consumed(obs_broker, tmp_path: Path) -> None:
    bs = obs_broker.bootstrap
    topic, group, client_id = unique("dropin"), unique("g-drop"), unique("consumer")
    create_topic(bs, topic, 2)
    keys = [f"d{i}" for i in range(8)]
    where = produce_traced(bs, topic, keys, partitions=2)
    consumer = Consumer(consumer_config(bs, group, tmp_path, **{
        **TRACE_ON, "ykafka.client.id": client_id, "ykafka.metrics.enabled": False}))
    got: list[Message] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:  # some through poll()
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
        while len(got) < len(keys) and time.monotonic() < deadline:  # the rest through consume()
            got += [m for m in consumer.consume(10, 0.5) if m.error() is None]
        assert len(got) == len(keys)
        wait_until(lambda: consumer.observer.stats()["enqueued"] == len(keys), 10, message="8 steps queued")
        assert consumer.observer.stats()["dropped_full"] == 0
    finally:
        consumer.close()
    trace = collect(bs, events.TRACE_TOPIC, lambda e: e["topic"] == topic and e["kind"] == "consumed",
                    lambda found: len(found) >= len(keys))
    assert sorted((e["msg_id"], e["partition"], e["offset"], e["group"], e["key"]) for e in trace) == sorted(
        (f"{topic}/{p}/{o}", p, o, group, key) for key, (p, o) in where.items())
    assert all(e["client_id"] == client_id and e["latency_ms"] is not None for e in trace)


def test_trace_switches_live_per_topic(obs_broker, tmp_path: Path) -> None:
    """A hot-config change of the topic's trace keys applies from the next message on (drop-in poll)."""
    bs = obs_broker.bootstrap
    topic, group = unique("live"), unique("g-live")
    create_topic(bs, topic, 1)
    where = produce_traced(bs, topic, [f"l{i}" for i in range(6)])
    consumer = Consumer(consumer_config(bs, group, tmp_path, **{"ykafka.metrics.enabled": False}))
    got: list[Message] = []

    def take(n: int) -> None:
        deadline = time.monotonic() + 30
        want = len(got) + n
        while len(got) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
        assert len(got) == want

    try:
        consumer.subscribe([topic])
        take(3)
        assert consumer.observer.watches[topic].rate == 0.0  # P2 default: off
        runtime = consumer.runtime
        runtime.hot.apply(runtime.hot.namespace(Scope(ScopeKind.TOPIC, topic)),
                          {"trace.enabled": "true", "trace.sample.rate": "1.0"}, "r-trace-on")
        assert topic not in consumer.observer.watches  # dropped with the config version
        take(3)
        assert consumer.observer.watches[topic].rate == 1.0
    finally:
        consumer.close()
    trace = collect(bs, events.TRACE_TOPIC, lambda e: e["topic"] == topic and e["kind"] == "consumed",
                    lambda found: len(found) >= 3)
    assert sorted(e["offset"] for e in trace) == [3, 4, 5]
    assert sorted(e["key"] for e in trace) == sorted(k for k, (_p, o) in where.items() if o >= 3)


@pytest.mark.parametrize("form", ["poll", "consume"])
def test_dropin_poll_traces_a_topic_that_arrives_while_it_calls_librdkafka_directly(obs_broker, tmp_path: Path,
                                                                                     form: str) -> None:
    """While no topic is traced the drop-in poll is librdkafka's own poll (the session's gate armed: issue 39),
    reached from C with nothing of ours after it, so a rebalance inside such a call must not give a traced topic:
    a subscribed topic counts before it has partitions here. The traced topic is subscribed before it exists;
    when it is created the rebalance that assigns it runs inside a call whose only message to return is its
    first, and every traced message gets its ``consumed`` step, the untraced topic none. A pattern subscription
    never arms (the rebalance may give any topic); ``poll(None)`` is refused armed or not, as librdkafka's poll
    refuses it. ``consume`` skips the same checks and per-message test while the gate is armed, and is held to
    the same: its traced messages get their ``consumed`` step."""
    bs = obs_broker.bootstrap
    plain, traced, group = unique("plain"), unique("traced"), unique("g-gate")
    create_topic(bs, plain, 1)
    produce_traced(bs, plain, [f"p{i}" for i in range(6)])
    # metadata every second: the subscribed topic's creation is seen (librdkafka's default is 5 minutes)
    consumer = Consumer(consumer_config(bs, group, tmp_path, **{"ykafka.metrics.enabled": False,
                                                                "topic.metadata.refresh.interval.ms": 1000}))
    got: dict[str, int] = defaultdict(int)

    def read(timeout: float) -> Any:
        if form == "poll":
            return consumer.poll(timeout)
        msgs = consumer.consume(1, timeout)
        return msgs[0] if msgs else None

    def take(topic: str, n: int) -> None:
        deadline = time.monotonic() + 30
        while got[topic] < n and time.monotonic() < deadline:
            msg = read(0.5)
            if msg is not None and msg.error() is None:
                got[msg.topic()] += 1
        assert got[topic] == n, dict(got)

    try:
        runtime = consumer.runtime
        runtime.hot.apply(runtime.hot.namespace(Scope(ScopeKind.TOPIC, traced)),
                          {"trace.enabled": "true", "trace.sample.rate": "1.0"}, "r-traced")
        consumer.subscribe([plain])
        take(plain, 3)
        gate = consumer._session.gate
        assert gate.fast is not None  # armed: nothing traced, nothing pending
        if form == "poll":
            with pytest.raises(TypeError, match="must be real number, not NoneType"):
                consumer.poll(None)  # librdkafka's own answer
        consumer.subscribe([plain, traced])  # the traced topic does not exist yet
        take(plain, 6)
        assert read(0.5) is None
        assert gate.fast is None  # the subscription holds a traced topic: every call checked
        if form == "poll":
            with pytest.raises(TypeError, match="must be real number, not NoneType"):
                consumer.poll(None)  # the checked call answers the same
        create_topic(bs, traced, 1)
        where = produce_traced(bs, traced, [f"t{i}" for i in range(5)])
        first = read(30)  # the rebalance that assigns it, then its first message, in one call
        assert first is not None and first.topic() == traced and first.error() is None
        got[traced] += 1
        take(traced, 5)
        assert consumer.observer.watches[traced].rate == 1.0
        assert consumer.observer.watch(plain).rate == 0.0
        wait_until(lambda: consumer.observer.stats().get("enqueued") == 5, 10, message="5 steps queued")
        consumer.subscribe([f"^{plain}$"])
        assert read(1.0) is None and read(0.5) is None
        assert gate.fast is None  # a pattern: its topics are known only after the rebalance, so never armed
    finally:
        consumer.close()
    trace = collect(bs, events.TRACE_TOPIC, lambda e: e["topic"] in (plain, traced) and e["kind"] == "consumed",
                    lambda found: len(found) >= 5)
    assert sorted((e["topic"], e["key"], e["offset"]) for e in trace) == sorted(
        (traced, key, o) for key, (_p, o) in where.items())


def test_fast_handler_is_timed_in_samples_with_exact_counts(obs_broker, running, tmp_path: Path) -> None:
    """A handler far below SAMPLED_TIMING_BELOW_S is timed one message in TIMING_STRIDE; the interval counts
    (handled, aged, failed) stay exact and the summary's handler time covers every message."""
    bs = obs_broker.bootstrap
    topic, group, client_id = unique("sampled"), unique("g-sampled"), unique("consumer")
    create_topic(bs, topic, 2)
    n, fail_every = 3000, 500
    _produce_numbered(bs, topic, n)

    def handle(msg: Message) -> None:
        if int(msg.value()) % fail_every == 0 and not H.get_int(msg.headers(), H.ATTEMPT):
            raise ValueError("once")

    consumer = Consumer(consumer_config(bs, group, tmp_path, **{
        "ykafka.client.id": client_id, "ykafka.metrics.interval.ms": 200, "trace.enabled": False,
        "consumer.retry.backoff.ms": "100", "consumer.retry.max.attempts": 1}))
    job = running(consumer, handle, [topic])
    failures = n // fail_every
    wait_until(lambda: consumer.engine.processed >= n + failures, 60, message="every message and retry handled")
    cost = consumer.engine.msg_cost
    job.stop()
    consumer.close()
    assert cost < SAMPLED_TIMING_BELOW_S  # the later tasks ran the sampled loop

    def total(found: list[dict[str, Any]], name: str) -> int:
        return _total(found, name, topic)

    found = collect(bs, events.METRICS_TOPIC, lambda e: e["client_id"] == client_id,
                    lambda found: total(found, MetricName.PROCESS_LATENCY) >= n + failures
                    and total(found, MetricName.CONSUME_ERRORS) >= failures)
    assert total(found, MetricName.PROCESS_LATENCY) == n + failures
    assert total(found, MetricName.CONSUME_ERRORS) == failures
    assert total(found, MetricName.CONSUME_LATENCY) == n + failures  # every message has a timestamp
    process = [e for e in found if e["name"] == MetricName.PROCESS_LATENCY]
    assert all(0 <= e["p50"] <= e["p99"] <= e["max"] and e["sum"] >= 0 for e in process)


def test_an_async_handler_is_timed_as_a_sync_one(obs_broker, tmp_path: Path) -> None:
    """``run_async`` goes through the same handler loop as ``run``: every message's age (``consume.latency_ms``,
    which the async loop once left out), handler time and failure reach the metrics."""
    bs = obs_broker.bootstrap
    topic, group, client_id = unique("async-timed"), unique("g-async"), unique("consumer")
    create_topic(bs, topic, 2)
    n, fail_every = 400, 100
    _produce_numbered(bs, topic, n)

    async def handle(msg: Message) -> None:
        if int(msg.value()) % fail_every == 0 and not H.get_int(msg.headers(), H.ATTEMPT):
            raise ValueError("once")

    consumer = Consumer(consumer_config(bs, group, tmp_path, **{
        "ykafka.client.id": client_id, "ykafka.metrics.interval.ms": 200, "trace.enabled": False,
        "consumer.retry.backoff.ms": "100", "consumer.retry.max.attempts": 1}))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            consumer.run_async(handle, topics=[topic])
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    failures = n // fail_every
    try:
        wait_until(lambda: consumer.engine.processed >= n + failures, 60, message="every message and retry handled")
    finally:
        consumer.stop()
        thread.join(30)
        consumer.close()
    assert errors == []

    def total(found: list[dict[str, Any]], name: str) -> int:
        return _total(found, name, topic)

    found = collect(bs, events.METRICS_TOPIC, lambda e: e["client_id"] == client_id,
                    lambda found: total(found, MetricName.CONSUME_LATENCY) >= n + failures
                    and total(found, MetricName.CONSUME_ERRORS) >= failures)
    assert total(found, MetricName.PROCESS_LATENCY) == n + failures
    assert total(found, MetricName.CONSUME_LATENCY) == n + failures  # every message has a timestamp
    assert total(found, MetricName.CONSUME_ERRORS) == failures


def _produce_numbered(bs: str, topic: str, n: int) -> None:
    """Messages "0" .. "n-1", keyed by their last digit."""
    raw = RawProducer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(n):
        raw.produce(topic, str(i).encode(), str(i % 10).encode())
    assert raw.flush(30) == 0


def _total(found: list[dict[str, Any]], name: str, topic: str) -> int:
    """The summed ``count`` of metric ``name`` for ``topic`` over the collected intervals."""
    return sum(e["count"] for e in found if e["name"] == name and e["topic"] == topic)
