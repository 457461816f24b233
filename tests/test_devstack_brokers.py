"""The local brokers are real, separate Kafka clusters."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from tests.conftest import EXTERNAL_BOOTSTRAP, consumer_config


def test_message_round_trip_on_dc_a_and_topic_absent_on_dc_b(brokers: dict[str, str], topic: str) -> None:
    producer = Producer({"bootstrap.servers": brokers["dc-a"], "enable.idempotence": True})
    delivered: list[int] = []
    for i in range(50):
        producer.produce(topic, key=f"k{i % 5}", value=f"v{i}",
                         on_delivery=lambda err, msg: delivered.append(msg.offset()) if err is None else None)
    assert producer.flush(15) == 0
    assert len(delivered) == 50

    consumer = Consumer(consumer_config(brokers["dc-a"]))
    consumer.subscribe([topic])
    values: list[str] = []
    try:
        for _ in range(60):
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                assert msg.error() is None
                values.append(msg.value().decode())
            if len(values) >= 50:
                break
    finally:
        consumer.close()
    assert sorted(values) == sorted(f"v{i}" for i in range(50))

    if EXTERNAL_BOOTSTRAP:
        pytest.skip("one external cluster serves both names; cannot check separation")
    topics_b = AdminClient({"bootstrap.servers": brokers["dc-b"]}).list_topics(timeout=10).topics
    assert topic not in topics_b
    topics_a = AdminClient({"bootstrap.servers": brokers["dc-a"]}).list_topics(timeout=10).topics
    assert topic in topics_a
