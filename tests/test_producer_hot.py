"""Operators change a running Producer through the MetaServer admin API; effects observed on the brokers.

Every test writes ``<key>:<seq>`` values and counts every record on the broker side: nothing lost,
nothing duplicated, per-key order kept.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import pytest

from tests.sdk_fixtures import check_stream, create_topic, read_topic, wait_until
from tests.support import LocalStack
from ykafka import Producer, ThrottledError
from ykafka.partitioner import java_partition


def _topic(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


class Stream:
    """Produces ``k<i>:<seq>`` with per-key sequence numbers and counts delivery reports."""

    def __init__(self, producer: Producer, topic: str, keys: int = 10) -> None:
        self.producer = producer
        self.topic = topic
        self.keys = keys
        self.sent = 0
        self.seq: Counter[str] = Counter()
        self.delivered: list[Any] = []
        self.failed: list[Any] = []

    def _cb(self, err: Any, msg: Any) -> None:
        (self.failed if err is not None else self.delivered).append(msg if err is None else err)

    def send(self, n: int, pause: float = 0.0) -> None:
        for _ in range(n):
            key = f"k{self.sent % self.keys}"
            value = f"{key}:{self.seq[key]}"
            while True:
                try:
                    self.producer.produce(self.topic, value.encode(), key.encode(), on_delivery=self._cb)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.seq[key] += 1
            self.sent += 1
            self.producer.poll(0)
            if pause:
                time.sleep(pause)

    def until(self, predicate: Any, timeout: float = 15.0, batch: int = 20) -> None:
        """Keep producing (load) until ``predicate()`` holds."""
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, "change not in force in time"
            self.send(batch, pause=0.001)


def test_acks_change_takes_effect_live_and_back(sdk_stack: LocalStack) -> None:
    topic = _topic("acks")
    with Producer(sdk_stack.client_config()) as producer:
        stream = Stream(producer, topic)
        stream.send(50)
        assert producer.flush(15) == 0
        assert all(m.offset() >= 0 for m in stream.delivered)  # acks=all: broker offsets reported

        sdk_stack.push(f"topic:{topic}", {"producer.acks": "0"})
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.acks") == "0")
        mark = len(stream.delivered)
        assert producer.flush(15) == 0
        stream.send(50)
        assert producer.flush(15) == 0
        after = stream.delivered[mark:]
        # acks=0: librdkafka gets no broker response, so no offset is known for the message
        assert after and all(m.offset() is None or m.offset() < 0 for m in after[-50:])
        # acks other than all: not idempotent, so one request in flight (per-key order across retries and re-sends)
        assert [(c["settings"]["acks"], c["settings"].get("max.in.flight.requests.per.connection"))
                for c in producer.clients() if not c["retiring"]] == [("0", 1)]

        sdk_stack.push(f"topic:{topic}", {"producer.acks": "all"})
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.acks") == "all")
        assert producer.flush(15) == 0
        mark = len(stream.delivered)
        stream.send(20)
        assert producer.flush(15) == 0
        assert all(m.offset() >= 0 for m in stream.delivered[mark:])
        # idempotent again: librdkafka's own ordering, up to 5 requests in flight (its default)
        assert [c["settings"].get("max.in.flight.requests.per.connection") for c in producer.clients()
                if not c["retiring"]] == [None]
    assert not stream.failed
    result = check_stream(read_topic(sdk_stack.clusters["dc-a"], topic, stream.sent), stream.sent)
    assert result["lost"] == 0 and result["duplicated"] == 0 and result["disorder"] == 0


def test_partitioner_and_exclusion_change_live(sdk_stack: LocalStack) -> None:
    topic = _topic("parts")
    create_topic(sdk_stack.clusters["dc-a"], topic, 4)
    with Producer(sdk_stack.client_config()) as producer:
        stream = Stream(producer, topic, keys=8)
        stream.send(80)
        assert producer.flush(15) == 0
        phase1 = stream.sent

        sdk_stack.push(f"topic:{topic}", {"producer.partitioner": "round_robin"})
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.partitioner") == "round_robin")
        assert producer.flush(15) == 0
        start2 = stream.sent
        stream.send(80)
        assert producer.flush(15) == 0
        phase2 = (start2, stream.sent)

        sdk_stack.push(f"topic:{topic}", {"producer.partitioner": "murmur2", "producer.partitions.exclude": "0,1"})
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.partitions.exclude") == (0, 1))
        assert producer.flush(15) == 0
        start3 = stream.sent
        stream.send(80)
        assert producer.flush(15) == 0
        phase3 = (start3, stream.sent)

    records = read_topic(sdk_stack.clusters["dc-a"], topic, stream.sent)
    assert check_stream(records, stream.sent)["lost"] == 0
    order = {f"k{i % 8}:{i // 8}": i for i in range(stream.sent)}  # value -> global send index
    by_index = {order[r.value]: r for r in records}
    # phase 1: Java-compatible murmur2 -> each key on exactly its Java partition
    for i in range(phase1):
        rec = by_index[i]
        assert rec.partition == java_partition(rec.key.encode(), 4), rec
    # phase 2: round robin -> every partition gets an equal share whatever the key
    shares = Counter(by_index[i].partition for i in range(*phase2))
    assert sorted(shares) == [0, 1, 2, 3] and max(shares.values()) - min(shares.values()) <= 1
    # phase 3: partitions 0 and 1 excluded -> keyed messages re-hashed over [2, 3], deterministically
    for i in range(*phase3):
        rec = by_index[i]
        assert rec.partition == [2, 3][java_partition(rec.key.encode(), 2)], rec


def test_rate_limit_throttles_and_bounds_the_wait(sdk_stack: LocalStack) -> None:
    topic = _topic("throttle")
    conf = sdk_stack.client_config(**{"ykafka.throttle.max.wait.ms": 3000})
    with Producer(conf) as producer:
        stream = Stream(producer, topic)
        stream.send(5)
        sdk_stack.push(f"topic:{topic}", {"producer.rate.limit.msgs": "100"})
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.rate.limit.msgs") == 100.0, batch=1)
        start = time.monotonic()
        first = stream.sent
        stream.send(250)
        elapsed = time.monotonic() - start
        assert producer.flush(15) == 0
        # 250 messages at 100/s with a burst of at most 100 take at least 1.5 s
        assert elapsed >= 1.4, elapsed
        sent_at = sorted(m.timestamp()[1] for m in stream.delivered[first:])
        window = sent_at[-1] - sent_at[0]
        assert window >= 1300, window  # broker-side create times span the throttled run

        # one message per 5 s: the next send would wait longer than the 3 s bound -> ThrottledError, not sent
        sdk_stack.push(f"topic:{topic}", {"producer.rate.limit.msgs": "0.2"})
        with pytest.raises(ThrottledError, match="more than the 3000 ms bound"):
            stream.until(lambda: False, batch=1, timeout=30)
        assert producer.in_force(topic)["producer.rate.limit.msgs"] == 0.2
        sdk_stack.push(f"topic:{topic}", {"producer.rate.limit.msgs": "0"})
        wait_until(lambda: producer.applied_config(topic)["producer.rate.limit.msgs"] == 0.0,
                   message="limit lifted")
        stream.send(20)  # unthrottled again
        assert producer.flush(15) == 0
    result = check_stream(read_topic(sdk_stack.clusters["dc-a"], topic, stream.sent), stream.sent)
    assert result["lost"] == 0 and result["duplicated"] == 0


def test_gray_release_applies_only_to_matching_ips(sdk_stack: LocalStack) -> None:
    topic = _topic("gray")
    with Producer(sdk_stack.client_config()) as producer:
        stream = Stream(producer, topic)
        stream.send(5)
        assert producer.runtime.ip == "127.0.0.1"
        sdk_stack.push(f"topic:{topic}", {"producer.linger.ms": "7"}, ips=["10.11.12.13"])
        sdk_stack.push(f"topic:{topic}", {"producer.compression": "lz4"})  # main release, for everyone
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.compression") == "lz4")
        assert producer.in_force(topic)["producer.linger.ms"] == 5  # another host's gray value: not applied
        # the namespace's gray branch now targets this host
        sdk_stack.push(f"topic:{topic}", {"producer.linger.ms": "7"}, ips=["127.0.0.1"])
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.linger.ms") == 7)
        assert producer.in_force(topic)["producer.compression"] == "lz4"
        assert producer.flush(15) == 0
    assert len(read_topic(sdk_stack.clusters["dc-a"], topic, stream.sent)) == stream.sent


def test_gray_release_to_a_label_reaches_the_labelled_client_on_a_shared_ip(sdk_stack: LocalStack) -> None:
    """Two producers on one host (one IP); only the one started with ``ykafka.client.label=canary`` takes the
    gray value, and it says so in its report. A malformed label is refused before anything is released."""
    topic = _topic("label")
    bad = sdk_stack.admin("POST", "/v1/admin/config", {"scope": f"topic:{topic}", "set": {"producer.linger.ms": "9"},
                                                       "labels": ["not a label!"]})
    assert bad.status_code == 422 and "labels" in bad.json()["errors"], bad.text
    canary_conf = sdk_stack.client_config(**{"ykafka.client.label": "canary"})
    with Producer(canary_conf) as canary, Producer(sdk_stack.client_config()) as plain:
        streams = [Stream(canary, topic), Stream(plain, topic)]
        for stream in streams:
            stream.send(5)
        assert canary.runtime.ip == plain.runtime.ip
        pushed = sdk_stack.push(f"topic:{topic}", {"producer.linger.ms": "9"}, labels=["canary"])
        assert pushed["gray"]["labels"] == ["canary"] and pushed["gray"]["ips"] == []
        streams[0].until(lambda: (canary.in_force(topic) or {}).get("producer.linger.ms") == 9)
        sdk_stack.push(f"topic:{topic}", {"producer.compression": "lz4"})  # a main release after it, for both
        streams[1].until(lambda: (plain.in_force(topic) or {}).get("producer.compression") == "lz4")
        assert plain.in_force(topic)["producer.linger.ms"] == 5  # the label's gray value never reached it
        assert canary.runtime.report_body()["extra"]["label"] == "canary"
        assert "label" not in plain.runtime.report_body()["extra"]
        for producer in (canary, plain):
            assert producer.flush(15) == 0
    sent = sum(stream.sent for stream in streams)
    assert len(read_topic(sdk_stack.clusters["dc-a"], topic, sent)) == sent


def test_invalid_value_rejected_old_value_kept_and_reported(sdk_stack: LocalStack) -> None:
    topic = _topic("invalid")
    ns = f"ykafka.topic.{topic}"
    conf = sdk_stack.client_config()
    with Producer(conf) as producer:
        stream = Stream(producer, topic)
        sdk_stack.push(f"topic:{topic}", {"producer.linger.ms": "20"})
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.linger.ms") == 20)
        # a hand edit in Apollo, bypassing the MetaServer's validation
        sdk_stack.publish_raw(ns, {"producer.linger.ms": "-5", "producer.acks": "2", "producer.compression": "zstd"})
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.compression") == "zstd")
        eff = producer.in_force(topic)
        assert eff["producer.linger.ms"] == 20 and eff["producer.acks"] == "all"
        rejected = {(r.key, r.value) for r in producer.runtime.hot.rejections()}
        assert {("producer.linger.ms", "-5"), ("producer.acks", "2")} <= rejected
        producer.runtime.report_now()

        def reported() -> bool:
            rows = sdk_stack.client_reports(sdk_stack.app_id)
            mine = [r for r in rows if r.get("client_id") == producer.runtime.client_id]
            errors = " ".join(" ".join(r.get("errors") or []) for r in mine)
            return "producer.linger.ms='-5'" in errors and "producer.acks='2'" in errors

        wait_until(reported, timeout=15, message="rejections in the client report")
        assert producer.flush(15) == 0


def test_client_report_shows_route_and_release_keys(sdk_stack: LocalStack) -> None:
    topic = _topic("report")
    with Producer(sdk_stack.client_config()) as producer:
        sdk_stack.push(f"topic:{topic}", {"producer.linger.ms": "9"})
        producer.produce(topic, b"k0:0", b"k0")
        assert producer.flush(15) == 0
        producer.runtime.report_now()

        def row() -> dict[str, Any] | None:
            for r in sdk_stack.client_reports(sdk_stack.app_id):
                if r.get("client_id") == producer.runtime.client_id and topic in (r.get("topics") or []):
                    return r
            return None

        found = wait_until(row, timeout=15, message="client report with the topic")
        assert found["role"] == "producer"
        assert found["extra"]["routes"][topic] == "dc-a"
        assert f"ykafka.topic.{topic}" in found["config_release_keys"]


def test_idempotence_socket_buffer_compression_and_byte_limit_live(sdk_stack: LocalStack) -> None:
    topic = _topic("misc")
    with Producer(sdk_stack.client_config()) as producer:
        stream = Stream(producer, topic)
        stream.send(10)
        sdk_stack.push(f"topic:{topic}", {"producer.idempotence": "false", "producer.compression": "zstd",
                                          "producer.socket.send.buffer.bytes": "262144"})
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.compression") == "zstd")
        live = [c["settings"] for c in producer.clients() if not c["retiring"]]
        # not idempotent: one request in flight keeps a key's records in order across retries (disaster recovery)
        assert live == [{"acks": "all", "enable.idempotence": "false", "linger.ms": 5, "batch.size": 1_000_000,
                         "compression.type": "zstd", "socket.send.buffer.bytes": 262144,
                         "max.in.flight.requests.per.connection": 1}]
        sdk_stack.push(f"topic:{topic}", {"producer.rate.limit.bytes": "500"})
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.rate.limit.bytes") == 500.0, batch=1)
        stream.send(100)  # ~5 bytes each: about the 500-byte burst
        start = time.monotonic()
        stream.send(200)  # ~1,000 more bytes at 500 B/s
        assert time.monotonic() - start >= 1.5
        assert producer.flush(15) == 0
    assert not stream.failed
    result = check_stream(read_topic(sdk_stack.clusters["dc-a"], topic, stream.sent), stream.sent)
    assert result["lost"] == 0 and result["duplicated"] == 0 and result["disorder"] == 0


def test_gray_rate_limit_paces_only_the_client_on_that_ip(sdk_stack: LocalStack) -> None:
    """The operator's path: a rate limit gray-released to one IP through the MetaServer. The producer on that IP
    is paced to it (measured: 150 messages at 50/s with at most a second's burst take about 2 s); the producer
    on another IP, same topic settings, is not. Every message of both arrives once, in key order."""
    ip_a, ip_b = "198.51.100.21", "198.51.100.22"
    topics = {ip: _topic("graypace") for ip in (ip_a, ip_b)}
    producers = {ip: Producer(sdk_stack.client_config(**{"ykafka.client.ip": ip})) for ip in (ip_a, ip_b)}
    try:
        streams = {ip: Stream(producers[ip], topics[ip]) for ip in (ip_a, ip_b)}
        for topic in topics.values():
            sdk_stack.push(f"topic:{topic}", {"producer.rate.limit.msgs": "50"}, ips=[ip_a])
            sdk_stack.push(f"topic:{topic}", {"producer.linger.ms": "6"})  # a later main release, for everyone
        for ip, stream in streams.items():  # each client has taken the later release: the gray one is settled
            stream.until(lambda ip=ip: (producers[ip].in_force(topics[ip]) or {}).get("producer.linger.ms") == 6,
                         batch=1)
        assert producers[ip_a].in_force(topics[ip_a])["producer.rate.limit.msgs"] == 50.0
        assert not producers[ip_b].in_force(topics[ip_b]).get("producer.rate.limit.msgs")
        rate = {}
        for ip, stream in streams.items():
            start = time.monotonic()
            stream.send(150)
            rate[ip] = 150 / (time.monotonic() - start)
            assert producers[ip].flush(15) == 0
        print("measured send rates (msg/s):", rate)
        # paced: a burst of at most 50 then 100 at 50/s take 2 s (75 msg/s over the run); 85 leaves timer slack
        assert rate[ip_a] <= 85, rate
        assert rate[ip_b] >= 3 * 50, rate  # the other client is not
    finally:
        for producer in producers.values():
            producer.close()
    for ip, stream in streams.items():
        result = check_stream(read_topic(sdk_stack.clusters["dc-a"], topics[ip], stream.sent), stream.sent)
        assert result["lost"] == 0 and result["duplicated"] == 0 and result["disorder"] == 0, (ip, result)


def test_rollback_through_the_metaserver_reaches_a_running_producer_and_is_reported(sdk_stack: LocalStack) -> None:
    """An operator rolls a topic's latest release back (``POST /v1/admin/config/rollback``): the running producer
    has the previous value in force again and reports the previous release key to the MetaServer."""
    topic = _topic("rollback")
    namespace = f"ykafka.topic.{topic}"
    with Producer(sdk_stack.client_config()) as producer:
        stream = Stream(producer, topic)
        sdk_stack.push(f"topic:{topic}", {"producer.linger.ms": "20"})
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.linger.ms") == 20)
        first_key = producer.runtime.release_keys()[namespace]
        sdk_stack.push(f"topic:{topic}", {"producer.linger.ms": "40"})
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.linger.ms") == 40)
        assert producer.runtime.release_keys()[namespace] != first_key
        resp = sdk_stack.admin("POST", "/v1/admin/config/rollback", {"scope": f"topic:{topic}"})
        assert resp.status_code == 200, resp.text
        stream.until(lambda: (producer.in_force(topic) or {}).get("producer.linger.ms") == 20)
        assert producer.runtime.release_keys()[namespace] == first_key

        def reported() -> bool:
            producer.runtime.report_now()
            return any(r.get("client_id") == producer.runtime.client_id
                       and (r.get("config_release_keys") or {}).get(namespace) == first_key
                       for r in sdk_stack.client_reports(sdk_stack.app_id))

        wait_until(reported, timeout=15, interval=0.5, message="the rolled-back release key in the client report")
        assert producer.flush(15) == 0
    result = check_stream(read_topic(sdk_stack.clusters["dc-a"], topic, stream.sent), stream.sent)
    assert result["lost"] == 0 and result["duplicated"] == 0
