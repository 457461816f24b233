"""Tracer: deterministic sampling, events on a real broker, drops counted and never blocking."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from confluent_kafka import Message, Producer

from tests.pipeline_fixtures import consumer, read_events, unique, wait_until
from ykafka import events
from ykafka.sink import EventSink
from ykafka.tracing import Tracer


def test_rate_follows_switches_and_grade_defaults() -> None:
    assert Tracer.rate({"topic.grade": "P2"}) == 0.0  # trace off by default
    assert Tracer.rate({"topic.grade": "P0"}) == 1.0  # P0 traces everything
    assert Tracer.rate({"topic.grade": "P1"}) == 0.1
    assert Tracer.rate({"trace.enabled": True, "trace.sample.rate": 0.25}) == 0.25
    assert Tracer.rate({"topic.grade": "P0", "trace.enabled": False}) == 0.0  # explicit value wins over grade
    tracer = Tracer.disabled()
    assert not tracer.enabled_for({"topic.grade": "P0"})
    assert tracer.emit("produced", topic="t") is False


def test_sampling_is_decided_once_where_the_message_is_produced(obs_broker) -> None:
    tracer = Tracer.for_client("c-s", "127.0.0.1", {"bootstrap.servers": obs_broker.bootstrap})
    decisions = [tracer.sample(0.05) for _ in range(20_000)]
    ids = [d for d in decisions if d]
    assert 0.04 < len(ids) / 20_000 < 0.06 and len(set(ids)) == len(ids)
    assert tracer.sample(1.0, "given-id") == "given-id"  # the Producer's ykafka-id becomes the trace id
    assert tracer.sample(1.0) == ""  # everything traced: identified by coordinates once acked, no header
    stamped = [f"id-{i}" for i in range(2000)]
    assert [tracer.sample(0.3, i) for i in stamped] == [i if Tracer.sampled(i, 0.3) else None for i in stamped]
    assert tracer.sample(0.0) is None and Tracer.disabled().sample(1.0) is None
    # hash sampling (messages of producers without tracing): same answer for the same id, str or bytes
    keys = [f"t/0/{i}" for i in range(20_000)]
    first = [Tracer.sampled(k, 0.05) for k in keys]
    assert first == [Tracer.sampled(k.encode(), 0.05) for k in keys]
    assert 0.04 < sum(first) / len(keys) < 0.06
    assert all(Tracer.sampled(k, 0.2) for k, kept in zip(keys, first, strict=True) if kept)
    tracer.close()


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
        "cluster": "dc-a", "client_id": "client-1", "app": "orders-app", "ip": "10.1.2.3", "detail": None,
        "sent_ts": None}
    assert tracer.stats()["delivered"] == 50 and tracer.stats()["dropped_full"] == 0
    tracer.close()


def test_consumer_traces_what_the_producer_sampled_under_the_original_topic(obs_broker) -> None:
    topic = unique("pay")
    retry_topic = f"{topic}.retry.g1"
    p = Producer({"bootstrap.servers": obs_broker.bootstrap})
    common = [("ykafka-original-topic", topic.encode()), ("ykafka-original-partition", b"0"),
              ("ykafka-original-offset", b"17")]
    p.produce(retry_topic, b"v", b"key-9", headers=[("ykafka-id", b"abc123"), ("ykafka-trace", b"abc123"), *common,
                                                    ("ykafka-attempt", b"2"),
                                                    ("ykafka-original-timestamp", b"1700000000000")],
              partition=0)
    unsampled = next(f"id-{i}" for i in range(100) if not Tracer.sampled(f"id-{i}", 0.5))
    p.produce(retry_topic, b"v", b"not-sampled", headers=[("ykafka-id", unsampled.encode()), *common],
              partition=0)
    p.produce(retry_topic, b"v", b"foreign", headers=common, partition=0)  # a producer without tracing
    p.flush(10)
    c = consumer(obs_broker.bootstrap)
    c.subscribe([retry_topic])
    msgs: list = []
    wait_until(lambda: msgs.extend(m for m in c.consume(10, 0.5) if m.error() is None) or len(msgs) == 3, timeout=30)
    c.close()
    tracer = Tracer.for_client("c-2", "127.0.0.1", {"bootstrap.servers": obs_broker.bootstrap})
    assert tracer.trace_message("consumed", msgs[0], {"topic.grade": "P0"}, group="g1", latency_ms=3.0)
    assert not tracer.trace_message("consumed", msgs[0], {"topic.grade": "P2"}, group="g1")  # trace off here
    assert not tracer.trace_message("consumed", msgs[1], rate=0.5, group="g1")  # its ykafka-id hashes out
    assert tracer.trace_id(msgs[1], 1.0) == unsampled
    assert tracer.trace_id(msgs[2], 1.0) == f"{topic}/0/17"  # original coordinates: the same in every group
    tracer.flush(10)
    found = read_events(obs_broker.bootstrap, events.TRACE_TOPIC, 1, lambda e: e["msg_id"] == "abc123")
    assert len(found) == 1
    event = found[0]
    assert (event["kind"], event["topic"], event["detail"], event["attempt"], event["group"], event["key"],
            event["msg_ts"], event["client_id"]) == ("consumed", topic, retry_topic, 2, "g1", "key-9",
                                                     1_700_000_000_000, "c-2")
    tracer.close()


def test_producer_fast_paths_emit_produced_acked_and_failed(obs_broker) -> None:
    tracer = Tracer.for_client("c-4", "127.0.0.1", {"bootstrap.servers": obs_broker.bootstrap}, cluster="dc-x")
    topic = unique("fast")
    p = Producer({"bootstrap.servers": obs_broker.bootstrap, "linger.ms": 0})
    seen: list = []
    mid = tracer.sample(1.0)
    assert mid == ""
    p.produce(topic, b"v", b"k1", partition=0,
              on_delivery=tracer.wrap_delivery(lambda err, msg: seen.append(err), topic, b"k1", mid))
    stamped = tracer.sample(0.5, "msg-7") or tracer.sample(1.0, "msg-7")
    p.produce(topic, b"v", b"k2", partition=0, headers=[("ykafka-id", b"msg-7")],
              on_delivery=tracer.wrap_delivery(lambda err, msg: seen.append(err), topic, b"k2", stamped))
    p.flush(10)
    assert seen == [None, None]
    tracer.flush(10)
    coordinates = f"{topic}/0/0"
    found = read_events(obs_broker.bootstrap, events.TRACE_TOPIC, 2, lambda e: e["msg_id"] == coordinates)
    assert [(e["kind"], e["key"], e["cluster"]) for e in found] == [("produced", "k1", "dc-x"), ("acked", "k1", "dc-x")]
    assert found[1]["offset"] == 0 and found[1]["latency_ms"] >= 0 and found[1]["msg_ts"] > 0
    assert {k: found[1][k] for k in ("topic", "partition", "group", "attempt", "error", "detail", "client_id")} == {
        "topic": topic, "partition": 0, "group": None, "attempt": None, "error": None, "detail": None,
        "client_id": "c-4"}  # every field in its place (the row's constant runs are written as one element)
    assert found[1]["sent_ts"] == found[0]["ts"] <= found[1]["ts"]
    assert found[0]["ts"] <= found[1]["ts"]
    by_id = read_events(obs_broker.bootstrap, events.TRACE_TOPIC, 2, lambda e: e["msg_id"] == "msg-7")
    assert [(e["kind"], e["offset"]) for e in by_id] == [("produced", None), ("acked", 1)]
    fail_id = unique("failed-id")
    failed = tracer.wrap_delivery(None, topic, "k3", fail_id)

    class _Failed:
        def latency(self) -> float:
            return 0.5

    failed("Broker: Message size too large", _Failed())
    tracer.flush(10)
    gone = read_events(obs_broker.bootstrap, events.TRACE_TOPIC, 1, lambda e: e["msg_id"] == fail_id)
    assert [(e["kind"], e["error"], e["latency_ms"]) for e in gone] == [
        ("produced", None, None), ("failed", "Broker: Message size too large", 500.0)]
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
    # the rate-1.0 delivery callback (its put inlined) drops on a full queue too, and still reports
    reports: list[Any] = []
    acked = tracer.wrap_delivery(lambda err, msg: reports.append(err), "t", None, "")
    delivered = Message(topic="t", partition=0, offset=7, key=None, value=b"v", timestamp=(1, 1), latency=0.01)
    acked(None, delivered)
    assert sink.stats()["trace"]["dropped_full"] == 901 and reports == [None]
    assert elapsed < 0.5  # 1000 emits against a dead cluster: no waiting
    sink.flush(3)
    wait_until(lambda: sink.stats()["trace"]["dropped_undeliverable"] == 100, timeout=10)
    assert sink.stats()["trace"]["delivered"] == 0
    sink.close(1)
    assert tracer.emit("produced", topic="t", msg_id="late") is False  # closed: dropped and counted
    assert sink.stats()["trace"]["dropped_full"] == 902
    acked(None, delivered)  # a callback built before the close: dropped and counted, the report still made
    assert sink.stats()["trace"]["dropped_full"] == 903 and sink.stats()["trace"]["queued"] == 0
    assert reports == [None, None]


def test_keyless_twin_rows_decode_to_the_same_times_as_clock_rows() -> None:
    """The fused keyless callback writes a create-time message's acked row without times (events.derive_times
    fills them: sent at msg_ts, acked latency later), and a log-append-time message's row with the clock's
    times, since the broker's append time is not when it was sent. Both decode to produced + acked."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    sink = EventSink({"bootstrap.servers": dead, "log_level": 0}, interval_s=3600)
    tracer = Tracer(sink, "c-5", cluster="dc-t")
    reports: list[Any] = []
    twin = tracer.wrap_delivery(lambda err, msg: reports.append(msg.offset()), "t", None, "").direct_twin(
        lambda *args: reports.append(args))
    sent = int(time.time() * 1000) - 40
    before = int(time.time() * 1000)
    twin(None, Message(topic="t", partition=1, offset=7, value=b"v", timestamp=(1, sent), latency=0.0255))
    twin(None, Message(topic="t", partition=1, offset=8, value=b"v", timestamp=(2, 1_700_000_000_000), latency=0.01))
    after = int(time.time() * 1000)
    assert reports == [7, 8]
    rows = list(tracer._channel.queue)  # type: ignore[union-attr]
    batch = events.encode_rows("trace", rows, {"client_id": "c-5"})
    _kind, decoded = events.decode(batch)
    steps = {(int(e["msg_id"].rsplit("/", 1)[1]), e["kind"]): e for e in decoded}
    assert sorted(steps) == [(7, "acked"), (7, "produced"), (8, "acked"), (8, "produced")]
    wire = json.loads(batch)["r"]
    assert wire[0][0] is None and type(wire[1][0]) is int  # no clock read for the create-time message
    create = steps[7, "acked"]
    assert (create["ts"], create["sent_ts"], create["latency_ms"], steps[7, "produced"]["ts"]) == (
        sent + 25, sent, 25.5, sent)
    assert (create["msg_id"], create["cluster"], create["client_id"], create["key"]) == ("t/1/7", "dc-t", "c-5", None)
    append = steps[8, "acked"]
    assert append["msg_ts"] == 1_700_000_000_000 and before <= append["ts"] <= after
    assert steps[8, "produced"]["ts"] == append["sent_ts"] == append["ts"] - 10
    sink.close(0.5)
