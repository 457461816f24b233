"""The ykafka Producer's observability hooks on a real broker: trace by grade / rate, statistics, client events."""

from __future__ import annotations

import functools
import json
import math
import time

from confluent_kafka import TopicPartition

from tests.consumer_fixtures import create_topic
from tests.pipeline_fixtures import consumer, read_events, unique, wait_until
from ykafka import Producer, events
from ykafka.events import MetricName


def test_p0_topic_is_fully_traced_with_statistics_and_client_events(obs_broker) -> None:
    bs = obs_broker.bootstrap
    topic, client_id = unique("p0"), unique("producer")
    acked: list = []
    producer = Producer({"bootstrap.servers": bs, "ykafka.client.id": client_id, "topic.grade": "P0",
                         "ykafka.metrics.interval.ms": 200, "linger.ms": 0})
    for i in range(5):
        producer.produce(topic, f"v{i}".encode(), f"k{i}".encode(), partition=0,
                         on_delivery=lambda err, msg: acked.append((err, msg.offset())))
    assert producer.flush(10) == 0
    assert acked == [(None, i) for i in range(5)]  # the user's callbacks still run, in order
    metrics = producer._obs.metrics
    assert metrics is not None
    seen = metrics.stats_seen
    wait_until(lambda: producer.poll(0.1) >= 0 and metrics.stats_seen >= seen + 2, timeout=10)  # stats after the acks
    producer.close()
    steps = read_events(bs, events.TRACE_TOPIC, 10, lambda e: e["topic"] == topic)
    assert sorted((e["msg_id"], e["kind"]) for e in steps) == sorted(
        (f"{topic}/0/{i}", kind) for i in range(5) for kind in ("produced", "acked"))
    assert {e["key"] for e in steps} == {f"k{i}" for i in range(5)}
    assert all(e["client_id"] == client_id and e["cluster"] == "default" for e in steps)
    clients = read_events(bs, events.CLIENTS_TOPIC, 3, lambda e: e["client_id"] == client_id, timeout=3)
    clients.sort(key=lambda c: c["ts"])  # separate batches: they may sit in different partitions
    assert [c["state"] for c in clients] == ["running", "closed"]  # at start and at close
    assert clients[0]["role"] == "producer"
    assert clients[0]["librdkafka_version"] and clients[0]["ykafka_version"]
    sent = read_events(bs, events.METRICS_TOPIC, 5, lambda e: e["client_id"] == client_id
                       and e["name"] == MetricName.SEND_MSGS and e["topic"] == topic, timeout=5)
    assert sum(e["count"] for e in sent) == 5  # librdkafka's cumulative counters, as deltas


def test_sampled_messages_carry_the_trace_header_and_only_they_are_traced(obs_broker) -> None:
    bs = obs_broker.bootstrap
    topic, quiet, client_id = unique("half"), unique("off"), unique("producer")
    producer = Producer({"bootstrap.servers": bs, "ykafka.client.id": client_id, "trace.enabled": True,
                         "trace.sample.rate": 0.5, "ykafka.metrics.enabled": False})
    create_topic(bs, topic, 1)
    for i in range(40):  # odd ones without a partition: Producer.produce samples them inline (issue 39)
        producer.produce(topic, b"v", f"k{i}".encode(), **({"partition": 0} if i % 2 == 0 else {}))
    producer.flush(10)
    producer.close()
    off = Producer({"bootstrap.servers": bs, "ykafka.metrics.enabled": False})  # P2 default: trace off
    off.produce(quiet, b"v", b"k", partition=0)
    off.flush(10)
    off.close()
    c = consumer(bs)
    c.assign([TopicPartition(topic, 0, 0)])
    got: list = []
    wait_until(lambda: got.extend(m for m in c.consume(100, 0.5) if m.error() is None) or len(got) >= 40, timeout=20)
    c.close()
    marked = {dict(m.headers() or [])["ykafka-trace"].decode() for m in got if m.headers()}
    assert 5 <= len(marked) <= 35  # about half, decided once per message
    parity = {int(m.key()[1:]) % 2 for m in got if m.headers()}
    assert parity == {0, 1}  # sampled on both paths (20 sends each at 0.5: none sampled on one is 1e-6)
    steps = read_events(bs, events.TRACE_TOPIC, 2 * len(marked), lambda e: e["topic"] == topic)
    assert {e["msg_id"] for e in steps} == marked
    assert sorted(e["kind"] for e in steps) == ["acked"] * len(marked) + ["produced"] * len(marked)
    assert read_events(bs, events.TRACE_TOPIC, 1, lambda e: e["topic"] == quiet, timeout=2) == []


def test_a_dead_trace_cluster_never_blocks_sends_and_close_is_bounded(obs_broker) -> None:
    import socket
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    topic = unique("blind")
    delivered: list = []
    producer = Producer({"bootstrap.servers": obs_broker.bootstrap, "ykafka.local.clusters": f"obs={dead}",
                         "ykafka.trace.cluster": "obs", "topic.grade": "P0", "log_level": 0})
    started = time.monotonic()
    for i in range(200):
        producer.produce(topic, b"v", f"k{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(10) == 0
    assert delivered == [None] * 200  # every business message acknowledged; every trace step queued
    tracer = producer._obs.tracer()
    producer.close()
    assert time.monotonic() - started < 8
    stats = tracer.stats()
    assert stats["delivered"] == 0 and stats["enqueued"] + stats["queued"] + stats["dropped_full"] == 200


def test_full_rate_on_the_direct_path_traces_every_send_shape(obs_broker) -> None:
    """Trace at 100 % on disaster recovery's direct path (the default): a send without key or partition with the
    last send's callback takes the one fused step (chain._traced_direct); keyed, pinned and callback-changing
    sends take the composed steps. Every message is traced once, at its coordinates, and reported to its own
    callback."""
    bs = obs_broker.bootstrap
    topic = unique("full-direct")
    reports: dict[str, list] = {"a": [], "b": []}

    def on_a(err, msg) -> None:
        reports["a"].append((err, msg.partition(), msg.offset()))

    def on_b(err, msg) -> None:
        reports["b"].append((err, msg.partition(), msg.offset()))

    with Producer({"bootstrap.servers": bs, "trace.enabled": True, "trace.sample.rate": 1.0,
                   "ykafka.metrics.enabled": False}) as producer:
        for i in range(60):
            callback = on_a if (i // 5) % 2 == 0 else on_b  # the callback changes every 5 sends
            if i % 6 == 0:
                producer.produce(topic, b"v", b"k", on_delivery=callback)
            elif i % 6 == 1:
                producer.produce(topic, b"v", partition=0, on_delivery=callback)
            else:
                producer.produce(topic, b"v", on_delivery=callback)
        assert producer.flush(30) == 0
        assert {"trace", "dr-direct"} <= set(producer._states[topic].steps)
    assert len(reports["a"]) == len(reports["b"]) == 30
    delivered = sorted(report[1:] for report in reports["a"] + reports["b"])
    assert all(report[0] is None for report in reports["a"] + reports["b"])
    steps = read_events(bs, events.TRACE_TOPIC, 120, lambda e: e["topic"] == topic)
    acked = [e for e in steps if e["kind"] == "acked"]
    assert sorted((e["partition"], e["offset"]) for e in acked) == delivered
    assert sorted(e["msg_id"] for e in acked) == sorted(f"{topic}/{p}/{o}" for p, o in delivered)
    assert sorted(e["msg_id"] for e in steps if e["kind"] == "produced") == sorted(e["msg_id"] for e in acked)
    assert [e["key"] for e in acked].count("k") == 10 and [e["key"] for e in acked].count(None) == 50


def _record(into: list[bytes], err, msg) -> None:
    into.append(msg.value())


def test_full_rate_threads_with_their_own_callbacks_each_get_only_their_reports(obs_broker) -> None:
    """Two threads send to one traced topic, each with its own delivery callback (the direct path's one-step
    send caches the last callback's fused twin): every report reaches the callback of the thread that sent it."""
    import threading

    topic = unique("full-threads")
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    callbacks = {name: functools.partial(_record, got[name]) for name in got}
    with Producer({"bootstrap.servers": obs_broker.bootstrap, "trace.enabled": True, "trace.sample.rate": 1.0,
                   "ykafka.metrics.enabled": False}) as producer:
        producer.produce(topic, b"warm-up")
        producer.flush(30)

        def send(name: str) -> None:
            for i in range(3000):
                producer.produce(topic, f"{name}-{i}".encode(), on_delivery=callbacks[name])

        threads = [threading.Thread(target=send, args=(name,)) for name in got]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert producer.flush(30) == 0
    for name, values in got.items():
        assert sorted(values) == sorted(f"{name}-{i}".encode() for i in range(3000)), name


def test_full_rate_keyless_rows_read_no_clock_and_readers_derive_their_times(obs_broker) -> None:
    """At 100 % a send without key or timestamp is traced by the fused callback, whose acked row leaves its times
    out (null ts on the wire): the send time is the message's create timestamp and the ack came ``latency_ms``
    later (events.derive_times). A send with its own timestamp must not be traced that way: its produced step
    is when it was sent, not the timestamp it carries."""
    bs = obs_broker.bootstrap
    topic, client_id = unique("keyless-times"), unique("producer")
    old = 1_700_000_000_000  # 2023: a send's own timestamp, far from now
    before = int(time.time() * 1000)
    with Producer({"bootstrap.servers": bs, "ykafka.client.id": client_id, "trace.enabled": True,
                   "trace.sample.rate": 1.0, "ykafka.metrics.enabled": False}) as producer:
        for _ in range(20):
            producer.produce(topic, b"v", on_delivery=lambda err, msg: None)
        producer.produce(topic, b"old", timestamp=old, on_delivery=lambda err, msg: None)
        assert producer.flush(30) == 0
        assert "trace" in producer._states[topic].steps
    after = int(time.time() * 1000)
    raw = _raw_rows(bs, client_id, 21)
    assert sum(1 for r in raw if r[0] is None) == 20  # the fused path's rows: no clock read
    steps = read_events(bs, events.TRACE_TOPIC, 42, lambda e: e["topic"] == topic)
    acked = {e["msg_id"]: e for e in steps if e["kind"] == "acked"}
    produced = {e["msg_id"]: e for e in steps if e["kind"] == "produced"}
    assert len(acked) == len(produced) == 21
    for msg_id, ack in acked.items():
        if ack["msg_ts"] == old:
            assert before <= produced[msg_id]["ts"] <= ack["ts"] <= after  # sent now, whatever it carries
            continue
        assert produced[msg_id]["ts"] == ack["msg_ts"] == ack["sent_ts"]
        assert ack["ts"] == ack["msg_ts"] + math.floor(ack["latency_ms"])
        assert before <= produced[msg_id]["ts"] <= ack["ts"] <= after
    assert sum(1 for ack in acked.values() if ack["msg_ts"] == old) == 1


def _raw_rows(bootstrap: str, client_id: str, expected: int) -> list[list]:
    """The trace rows one client wrote, as they are on the wire (before any reader fills them in)."""
    c = consumer(bootstrap)
    rows: list[list] = []
    try:
        meta = wait_until(lambda: c.list_topics(events.TRACE_TOPIC, timeout=5).topics.get(events.TRACE_TOPIC), 20)
        c.assign([TopicPartition(events.TRACE_TOPIC, p, 0) for p in meta.partitions])
        deadline = time.monotonic() + 20
        while len(rows) < expected and time.monotonic() < deadline:
            for msg in c.consume(1000, 0.5):
                if msg.error() is None and msg.key() == client_id.encode():
                    rows.extend(json.loads(msg.value())["r"])
    finally:
        c.close()
    return rows
