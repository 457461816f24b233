"""The healthy-cluster fast path of the DR engine behind ``ykafka.Producer``, on a real broker.

While its cluster is healthy a topic is sent straight through the Producer's own librdkafka client (no
engine call per message); a delivery failure still comes back to the engine, which spills it. These
tests break the broker while the fast path is in use and count every message end to end: nothing lost,
every callback fired once, and a key's messages never overtaken.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.dr_fixtures import create_topic, first_occurrence_ordered, read_all, strict_count, tally, unique
from tests.support import Broker
from ykafka import Producer

KEYS = 8


def _producer(broker: Broker, tmp_path: Path, **extra: Any) -> Producer:
    conf: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap,
        "ykafka.cache.dir": str(tmp_path / "cache"),
        "ykafka.report.enabled": False,
        "spill.after.ms": 1500, "health.probe.interval.ms": 200, "health.down.failures": 2,
        "log_level": 0,
    }
    conf.update(extra)
    return Producer(conf)


class Stream:
    """Produces 0, 1, 2, ... from a thread: keyed (``i % KEYS``) or, every third message, without a key."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.sent: list[int] = []
        self.acked: dict[int, int] = {}
        self.acked_at: dict[int, float] = {}  # first acknowledgement
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err: Any, msg: Any) -> None:
        if err is None:
            i = int(msg.value())
            self.acked[i] = self.acked.get(i, 0) + 1
            self.acked_at.setdefault(i, time.monotonic())
        else:
            self.errors.append(err.name())

    def send(self, n: int) -> None:
        for _ in range(n):
            i = len(self.sent)
            key = None if i % 3 == 2 else str(i % KEYS).encode()
            self.producer.produce(self.topic, str(i).encode(), key=key, on_delivery=self._cb)
            self.sent.append(i)
            self.producer.poll(0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.send(5)
            time.sleep(0.002)

    def start(self) -> Stream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _keyed_in_order(records: list[Any]) -> bool:
    ordered = sorted(records, key=lambda m: (m.partition(), m.offset()))
    if os.environ.get("YK_DEBUG_ORDER"):
        last: dict[Any, int] = {}
        seen: set[Any] = set()
        for m in ordered:
            if m.key() is None or (m.key(), m.value()) in seen:
                continue
            seen.add((m.key(), m.value()))
            v = int(m.value())
            if v < last.get(m.key(), -1):
                print("OUT OF ORDER", m.key(), v, "after", last[m.key()], "p", m.partition(), "o", m.offset())
            last[m.key()] = max(v, last.get(m.key(), -1))
    return first_occurrence_ordered((m.key(), m.value()) for m in ordered if m.key() is not None)


def test_healthy_topic_uses_the_direct_path(one_broker: Broker, tmp_path: Path) -> None:
    topic = unique("direct-healthy")
    create_topic(one_broker.bootstrap, topic, 3)
    producer = _producer(one_broker, tmp_path)
    try:
        stream = Stream(producer, topic)
        stream.send(3000)
        assert producer.flush(30) == 0
        engine = producer.disaster_recovery
        assert engine is not None
        state = producer._states[topic]
        link = engine.status()["links"]["default"]
        records = read_all(one_broker.bootstrap, topic, expect=3000)
    finally:
        producer.close()
    assert state.direct is not None and state.steps == ("dr-direct",)  # the fast path, not the engine's send
    # the engine's per-message send took at most the first message (the one that resolved the topic)
    assert link["direct"] <= 1 and link["available"]
    assert tally(stream.sent, [int(m.value()) for m in records]) == {"sent": 3000, "delivered": 3000, "lost": 0,
                                                                     "duplicated": 0, "unexpected": 0}
    assert sorted(stream.acked) == stream.sent and set(stream.acked.values()) == {1} and not stream.errors
    assert _keyed_in_order(records)


def test_a_message_the_broker_refuses_for_good_fails_once_and_says_so_once(one_broker: Broker, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A message the cluster rejects for good (larger than the topic's ``max.message.bytes``) is neither spilled nor
    sent again: its delivery callback gets librdkafka's own error, and the log says so once per topic and error,
    with the rest counted (a sender without a callback would otherwise hear of the loss nowhere). The cluster stays
    in service: the next message that fits is delivered straight."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic
    from structlog.testing import capture_logs

    from ykafka.dr import link as link_module

    topic = unique("direct-refused")
    admin = AdminClient({"bootstrap.servers": one_broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "2000"})]).values():
        future.result(15)
    create_topic(one_broker.bootstrap, topic, 1, exact=False)  # visible
    producer = _producer(one_broker, tmp_path)
    reports: list[tuple[int | None, bytes]] = []

    def record(err: Any, msg: Any) -> None:
        reports.append((None if err is None else err.code(), msg.value()[:6]))

    try:
        with capture_logs() as logs:
            for i in range(6):
                if i == 5:  # the interval over: the next failure is logged again, with the four not logged
                    monkeypatch.setattr(link_module, "FAILURE_LOG_INTERVAL_S", 0.0)
                producer.produce(topic, f"big-{i}:".encode() + b"x" * 8000, on_delivery=record)
                assert producer.flush(30) == 0  # one request each: six refusals, not one refused batch
            producer.produce(topic, b"fits", on_delivery=record)
            assert producer.flush(30) == 0
        status = producer.disaster_recovery.status() if producer.disaster_recovery else {}
        records = read_all(one_broker.bootstrap, topic, expect=1)
    finally:
        producer.close()
    assert reports == [(KafkaError.MSG_SIZE_TOO_LARGE, f"big-{i}:".encode()) for i in range(6)] + [(None, b"fits")]
    failed = [(e["topic"], e["error"], e["more_since_last"]) for e in logs if e["event"] == "delivery.failed"]
    assert failed == [(topic, "MSG_SIZE_TOO_LARGE", 0), (topic, "MSG_SIZE_TOO_LARGE", 4)]
    link = status["links"]["default"]
    assert link["failed"] == 6 and link["spilled"] == 0 and link["available"]
    assert status["spill"]["default"]["depth"] == 0
    assert [m.value() for m in records] == [b"fits"]


def _break_until_spilled(producer: Producer, topic: str, break_it: Callable[[], None],
                         depth: int) -> tuple[Stream, int]:
    """Stream, break the broker, wait until ``depth`` messages are on disk; returns the stream and the depth."""
    stream = Stream(producer, topic).start()
    time.sleep(0.5)
    break_it()
    deadline = time.monotonic() + 20
    while _depth(producer) < depth and time.monotonic() < deadline:
        time.sleep(0.1)
    return stream, _depth(producer)


def _depth(producer: Producer) -> int:
    engine = producer.disaster_recovery
    assert engine is not None
    return int(engine.status()["spill"].get("default", {}).get("depth", 0))


def _finish(producer: Producer, stream: Stream) -> None:
    """Keep streaming while the replay runs (a spilled key's new sends queue behind it), then wait until
    every callback fired, everything is flushed and the spill is replayed."""
    time.sleep(1.5)
    stream.stop()
    deadline = time.monotonic() + 60
    while len(stream.acked) < len(stream.sent) and time.monotonic() < deadline:
        producer.poll(0.1)
    assert producer.flush(30) == 0
    engine = producer.disaster_recovery
    assert engine is not None
    assert engine.wait_idle(60), engine.status()


def _break(action: Callable[[], None], at: list[float]) -> Callable[[], None]:
    def run() -> None:
        action()
        at.append(time.monotonic())
    return run


def _strict(stream: Stream, records: list[Any], broken_at: float) -> dict[str, int]:
    return strict_count(stream.sent, [int(m.value()) for m in records],
                        {i for i, at in stream.acked_at.items() if at < broken_at})


def test_frozen_broker_under_the_direct_path_spills_in_key_order(one_broker: Broker, tmp_path: Path) -> None:
    """SIGSTOP while the fast path streams: queued and in-flight messages time out, come back through the
    direct callbacks, are spilled in produce order and replayed; the durable cluster keeps its data, so the final
    read holds every message once (a retry of one in flight at the freeze counted apart), each key in order."""
    topic = unique("direct-freeze")
    create_topic(one_broker.bootstrap, topic, 3)
    producer = _producer(one_broker, tmp_path)
    frozen: list[float] = []
    try:
        stream, depth = _break_until_spilled(producer, topic, _break(one_broker.freeze, frozen), 200)
        one_broker.thaw()
        _finish(producer, stream)
    finally:
        producer.close()
    records = read_all(one_broker.bootstrap, topic, expect=len(stream.sent))
    counts = _strict(stream, records, frozen[0])
    print("direct path, broker frozen:", counts, "spilled at peak:", depth)
    assert depth >= 200
    assert counts["lost"] == 0 and counts["duplicated"] == 0 and counts["unexpected"] == 0
    assert sorted(stream.acked) == stream.sent and not stream.errors  # every callback fired, all success
    assert _keyed_in_order(records)


def test_killed_broker_under_the_direct_path_spills_and_replays(one_broker: Broker, tmp_path: Path) -> None:
    """SIGKILL of every broker while the fast path streams: spilled, the durable cluster restarts with what it
    acknowledged and the spill replays: every message read back once (retries of messages in flight at the kill
    counted apart), each key in order."""
    topic = unique("direct-kill")
    create_topic(one_broker.bootstrap, topic, 3)
    producer = _producer(one_broker, tmp_path)
    killed: list[float] = []
    try:
        stream, depth = _break_until_spilled(producer, topic, _break(one_broker.kill, killed), 300)
        one_broker.start()  # same addresses, same bucket
        _finish(producer, stream)
    finally:
        producer.close()
    records = read_all(one_broker.bootstrap, topic, expect=len(stream.sent))
    counts = _strict(stream, records, killed[0])
    print("direct path, broker killed:", counts, "spilled at peak:", depth)
    assert depth >= 300
    assert counts["lost"] == 0 and counts["duplicated"] == 0 and counts["unexpected"] == 0
    assert sorted(stream.acked) == stream.sent and not stream.errors
    assert _keyed_in_order(records)

