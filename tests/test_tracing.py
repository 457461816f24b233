"""Tracer: deterministic sampling, events on a real broker, drops counted and never blocking."""

from __future__ import annotations

import socket
import time

from confluent_kafka import Producer

from tests.pipeline_fixtures import consumer, read_events, unique, wait_for
from ykafka import events
from ykafka.tracing import EventSink, Tracer, new_message_id

pytest_plugins = ["tests.pipeline_fixtures"]


def test_rate_follows_switches_and_grade_defaults() -> None:
    assert Tracer.rate({"topic.grade": "P2"}) == 0.0  # trace off by default
    assert Tracer.rate({"topic.grade": "P0"}) == 1.0  # P0 traces everything
    assert Tracer.rate({"topic.grade": "P1"}) == 0.1
    assert Tracer.rate({"trace.enabled": True, "trace.sample.rate": 0.25}) == 0.25
    assert Tracer.rate({"topic.grade": "P0", "trace.enabled": False}) == 0.0  # explicit value wins over grade
    tracer = Tracer.disabled()
    assert not tracer.enabled_for({"topic.grade": "P0"})
    assert tracer.emit("produced", topic="t") is False


def test_sampling_is_decided_once_per_message_id() -> None:
    ids = [new_message_id() for _ in range(20_000)]
    assert len(set(ids)) == 20_000
    first = [Tracer.sampled(i, 0.05) for i in ids]
    again = [Tracer.sampled(i.encode(), 0.05) for i in ids]
    assert first == again  # same answer for str / bytes ids, every time, in any process
    share = sum(first) / len(ids)
    assert 0.04 < share < 0.06
    # a higher rate keeps every message a lower rate kept (lifecycles survive a rate increase)
    assert all(Tracer.sampled(i, 0.2) for i, kept in zip(ids, first, strict=True) if kept)
    assert all(Tracer.sampled(i, 1.0) for i in ids[:100])
    assert not any(Tracer.sampled(i, 0.0) for i in ids[:100])
    assert not Tracer.sampled(None, 0.5)


def test_events_reach_the_trace_topic_in_order_with_all_fields(obs_broker) -> None:
    tracer = Tracer.for_client("client-1", "10.1.2.3", {"bootstrap.servers": obs_broker.bootstrap},
                               app="orders-app", cluster="dc-a")
    topic = unique("orders")
    for i in range(50):
        assert tracer.emit("acked", topic=topic, key=f"k{i}".encode(), msg_id=f"id-{i}", partition=1, offset=i,
                           msg_ts=1_700_000_000_000 + i, latency_ms=2.5)
    assert tracer.flush(10) == 0
    found = read_events(obs_broker.bootstrap, events.TRACE_TOPIC, 50, lambda e: e["topic"] == topic)
    assert [e["msg_id"] for e in found] == [f"id-{i}" for i in range(50)]
    assert found[7] | {"ts": 0} == {
        "ts": 0, "kind": "acked", "msg_id": "id-7", "topic": topic, "key": "k7", "partition": 1, "offset": 7,
        "msg_ts": 1_700_000_000_007, "latency_ms": 2.5, "group": None, "attempt": None, "error": None,
        "cluster": "dc-a", "client_id": "client-1", "app": "orders-app", "ip": "10.1.2.3", "detail": None}
    assert tracer.stats()["delivered"] == 50 and tracer.stats()["dropped_full"] == 0
    tracer.close()


def test_consumer_side_trace_uses_original_topic_and_attempt(obs_broker) -> None:
    topic = unique("pay")
    retry_topic = f"{topic}.retry.g1"
    p = Producer({"bootstrap.servers": obs_broker.bootstrap})
    p.produce(retry_topic, b"v", b"key-9", headers=[("ykafka-id", b"abc123"), ("ykafka-original-topic", topic.encode()),
                                                    ("ykafka-attempt", b"2"),
                                                    ("ykafka-original-timestamp", b"1700000000000")])
    p.flush(10)
    c = consumer(obs_broker.bootstrap)
    c.subscribe([retry_topic])
    msg = wait_for(lambda: (m := c.poll(0.5)) is not None and m.error() is None and m, timeout=30)
    c.close()
    tracer = Tracer.for_client("c-2", "127.0.0.1", {"bootstrap.servers": obs_broker.bootstrap})
    assert tracer.trace_message("consumed", msg, {"topic.grade": "P0"}, group="g1", latency_ms=3.0)
    assert not tracer.trace_message("consumed", msg, {"topic.grade": "P2"}, group="g1")  # not sampled
    tracer.flush(10)
    found = read_events(obs_broker.bootstrap, events.TRACE_TOPIC, 1, lambda e: e["msg_id"] == "abc123")
    assert len(found) == 1
    event = found[0]
    assert (event["kind"], event["topic"], event["detail"], event["attempt"], event["group"], event["key"],
            event["msg_ts"]) == ("consumed", topic, retry_topic, 2, "g1", "key-9", 1_700_000_000_000)
    tracer.close()


def test_full_queue_and_dead_cluster_drop_with_counts_never_block() -> None:
    with socket.socket() as sock:  # a port nobody listens on: the trace cluster is down
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    sink = EventSink({"bootstrap.servers": dead, "message.timeout.ms": 300, "log_level": 0},
                     queue_max=100, interval_s=3600)
    tracer = Tracer(sink, "c-3")
    started = time.perf_counter()
    accepted = sum(tracer.emit("produced", topic="t", msg_id=str(i)) for i in range(1000))
    elapsed = time.perf_counter() - started
    assert accepted == 100
    assert sink.stats()["trace"]["dropped_full"] == 900
    assert elapsed < 0.5  # 1000 emits against a dead cluster: no waiting
    sink.flush(3)
    wait_for(lambda: sink.stats()["trace"]["dropped_undeliverable"] == 100, timeout=10)
    assert sink.stats()["trace"]["delivered"] == 0
    sink.close(1)
    assert tracer.emit("produced", topic="t", msg_id="late") is False  # closed: dropped and counted
    assert sink.stats()["trace"]["dropped_full"] == 901
