"""The per-topic send chain (ykafka/producer/chain.py): each feature a topic's settings turn on adds its step,
a topic with none sends straight into librdkafka, and every message still arrives (real broker)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from tests.dr_fixtures import create_topic, read_all, unique
from tests.support import Broker
from ykafka import Producer


def _producer(broker: Broker, tmp_path: Path, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap, "ykafka.cache.dir": str(tmp_path),
                     "ykafka.report.enabled": False, "log_level": 0, **extra})


def test_a_topic_without_per_message_steps_sends_straight_into_librdkafka(one_broker: Broker,
                                                                          tmp_path: Path) -> None:
    topic = unique("chain-plain")
    create_topic(one_broker.bootstrap, topic, 1)
    with _producer(one_broker, tmp_path, **{"ykafka.dr.enabled": False}) as producer:
        for i in range(50):
            producer.produce(topic, str(i).encode())
        assert producer.flush(30) == 0
        state = producer._states[topic]
        assert state.steps == ()
        assert state.send == state.client.rd.produce and state.send_reserved == state.send
    assert sorted(int(m.value()) for m in read_all(one_broker.bootstrap, topic, expect=50)) == list(range(50))


def test_each_feature_adds_its_step_in_order(one_broker: Broker, tmp_path: Path) -> None:
    topic = unique("chain-full")
    create_topic(one_broker.bootstrap, topic, 3)
    delivered: list[Any] = []
    with _producer(one_broker, tmp_path, **{
            "ykafka.message.id": True, "trace.enabled": True, "trace.sample.rate": 1.0,
            "producer.partitioner": "round_robin", "producer.rate.limit.msgs": 100_000}) as producer:
        for i in range(90):
            producer.produce(topic, str(i).encode(), on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(30) == 0
        state = producer._states[topic]
        # outermost first: the partition count re-read when due, the id (and its trace), the throttle, the
        # partitioner, then the disaster-recovery engine's send hook (on by default)
        assert state.steps == ("expiry", "message-id", "throttle", "partitioner", "hooks")
        assert state.send_reserved is not state.send  # the asyncio layer's chain: no throttle step
    records = read_all(one_broker.bootstrap, topic, expect=90)
    assert delivered == [None] * 90
    assert sorted(int(m.value()) for m in records) == list(range(90))
    assert Counter(m.partition() for m in records) == {0: 30, 1: 30, 2: 30}  # round robin, in Python
    assert all(any(k == "ykafka-id" for k, _ in m.headers() or []) for m in records)
