"""Serializing clients with confluent-kafka's own JSON and Avro serializers, on real brokers.

There is no Schema Registry server here; confluent-kafka's in-process registry (``mock://``) stands in for
it, and the serializers and deserializers are confluent-kafka's real ones, passed to ykafka unchanged.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, StringDeserializer, StringSerializer

from tests.consumer_fixtures import create_topic, unique
from tests.dr_fixtures import read_all
from tests.support import Broker
from ykafka import DeserializingConsumer, SerializingProducer
from ykafka.aio import AsyncDeserializingConsumer, AsyncSerializingProducer

# Tansu's slow group joins (tests.support.tansu_group_quirk): this module's brokers are Tansu (the fast tier)
FAST_JOIN = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
ORDER_AVRO = """
{"type": "record", "name": "Order", "fields": [
  {"name": "id", "type": "int"}, {"name": "item", "type": "string"}, {"name": "qty", "type": "int"}]}
"""
ORDER_JSON = """
{"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
 "properties": {"id": {"type": "integer"}, "item": {"type": "string"}, "qty": {"type": "integer"}},
 "required": ["id", "item", "qty"]}
"""


def _registry() -> SchemaRegistryClient:
    return SchemaRegistryClient.new_client({"url": f"mock://{unique('sr')}"})


def _orders(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "item": f"item-{i % 7}", "qty": i % 5 + 1} for i in range(n)]


def _round_trip(bootstrap: str, tmp_path: Path, serializer: Any, deserializer: Any) -> list[dict[str, Any]]:
    topic, group = unique("serde"), unique("g")
    create_topic(bootstrap, topic, 2)
    producer = SerializingProducer({"bootstrap.servers": bootstrap, "ykafka.cache.dir": str(tmp_path / "p"),
                                    "key.serializer": StringSerializer("utf_8"), "value.serializer": serializer})
    acked: list[Any] = []
    for order in _orders(40):
        producer.produce(topic, key=str(order["id"]), value=order,
                         on_delivery=lambda err, msg: acked.append(err or msg))
    assert producer.flush(30) == 0
    producer.close()
    assert len(acked) == 40 and all(not isinstance(a, Exception) and a.error() is None for a in acked)

    consumer = DeserializingConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                      "auto.offset.reset": "earliest", "ykafka.cache.dir": str(tmp_path / "c"),
                                      **FAST_JOIN,
                                      "key.deserializer": StringDeserializer("utf_8"),
                                      "value.deserializer": deserializer})
    consumer.subscribe([topic])
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while len(got) < 40 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.key() == str(msg.value()["id"])
            got.append(msg.value())
    consumer.close()
    return got


def test_avro_round_trip_through_the_sync_serializing_clients(bootstrap: str, tmp_path: Path) -> None:
    registry = _registry()
    got = _round_trip(bootstrap, tmp_path, AvroSerializer(registry, ORDER_AVRO),
                      AvroDeserializer(registry, ORDER_AVRO))
    assert sorted(got, key=lambda o: o["id"]) == _orders(40)


def test_json_schema_round_trip_through_the_sync_serializing_clients(bootstrap: str, tmp_path: Path) -> None:
    registry = _registry()
    got = _round_trip(bootstrap, tmp_path, JSONSerializer(ORDER_JSON, registry),
                      JSONDeserializer(ORDER_JSON, schema_registry_client=registry))
    assert sorted(got, key=lambda o: o["id"]) == _orders(40)


def test_bad_value_is_refused_before_sending_and_nothing_reaches_the_topic(bootstrap: str, tmp_path: Path) -> None:
    from confluent_kafka.error import ValueSerializationError

    topic = unique("serde-bad")
    create_topic(bootstrap, topic, 1)
    registry = _registry()
    producer = SerializingProducer({"bootstrap.servers": bootstrap, "ykafka.cache.dir": str(tmp_path / "p"),
                                    "value.serializer": JSONSerializer(ORDER_JSON, registry)})
    try:
        producer.produce(topic, value={"id": "not-an-int", "item": 3})
        raise AssertionError("an invalid value was accepted")
    except ValueSerializationError as exc:
        assert "not-an-int" in str(exc) or "is not of type" in str(exc)
    producer.produce(topic, value={"id": 1, "item": "ok", "qty": 1})
    assert producer.flush(30) == 0
    producer.close()
    assert len(read_all(bootstrap, topic, expect=1)) == 1


def test_async_serializing_clients_round_trip_avro(bootstrap: str, tmp_path: Path) -> None:
    topic, group = unique("aserde"), unique("g")
    create_topic(bootstrap, topic, 2)
    registry = _registry()

    async def run() -> list[dict[str, Any]]:
        producer = await AsyncSerializingProducer({
            "bootstrap.servers": bootstrap, "ykafka.cache.dir": str(tmp_path / "p"),
            "key.serializer": StringSerializer("utf_8"), "value.serializer": AvroSerializer(registry, ORDER_AVRO)})
        futures = [await producer.produce(topic, key=str(o["id"]), value=o) for o in _orders(30)]
        await asyncio.gather(*futures)
        await producer.close()
        consumer = await AsyncDeserializingConsumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **FAST_JOIN,
            "ykafka.cache.dir": str(tmp_path / "c"), "key.deserializer": StringDeserializer("utf_8"),
            "value.deserializer": AvroDeserializer(registry, ORDER_AVRO)})
        await consumer.subscribe([topic])
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while len(got) < 30 and time.monotonic() < deadline:
            msg = await consumer.poll(0.5)
            if msg is not None:
                got.append(msg.value())
        await consumer.close()
        return got

    assert sorted(asyncio.run(run()), key=lambda o: o["id"]) == _orders(30)


def test_message_spilled_while_the_cluster_is_down_is_replayed_byte_identical(tmp_path: Path) -> None:
    """Avro messages sent while the only broker is down go to the disk spill as serialized bytes; after the
    broker is back the replay sends exactly those bytes (the serializer runs once, at produce time)."""
    broker = Broker("serde-solo", tmp_path / "brokers").start()
    topic = unique("serde-spill")
    registry = _registry()
    serializer = AvroSerializer(registry, ORDER_AVRO)
    try:
        create_topic(broker.bootstrap, topic, 1)
        producer = SerializingProducer({
            "bootstrap.servers": broker.bootstrap, "ykafka.cache.dir": str(tmp_path / "cache"),
            "ykafka.report.enabled": False, "spill.after.ms": 1000, "health.probe.interval.ms": 200,
            "health.down.failures": 2, "log_level": 0, "value.serializer": serializer})
        acked: list[Any] = []
        producer.produce(topic, value=_orders(1)[0], on_delivery=lambda e, m: acked.append(e or m))
        assert producer.flush(15) == 0  # the topic is resolved and healthy
        broker.kill()
        for order in _orders(50)[1:]:
            producer.produce(topic, value=order, on_delivery=lambda e, m: acked.append(e or m))
        engine = producer.disaster_recovery
        assert engine is not None
        deadline = time.monotonic() + 20
        while engine.status()["spill"].get("default", {}).get("depth", 0) < 49 and time.monotonic() < deadline:
            producer.poll(0.1)
        at_wait = engine.status()  # in the assertion's message: what the engine saw if the spill fell short
        spilled = at_wait["spill"].get("default", {}).get("depth", 0)
        broker.start()  # same port; Tansu's memory storage starts empty: the replay's sends create the topic
        deadline = time.monotonic() + 60
        while len(acked) < 50 and time.monotonic() < deadline:
            producer.poll(0.1)
        assert producer.flush(30) == 0
        assert engine.wait_idle(60), engine.status()
        producer.close()
        records = read_all(broker.bootstrap, topic, expect=49)
    finally:
        broker.close()
    assert spilled == 49, at_wait
    assert all(not isinstance(a, Exception) and a.error() is None for a in acked) and len(acked) == 50
    ctx = SerializationContext(topic, MessageField.VALUE)
    expected = {serializer(order, ctx) for order in _orders(50)[1:]}
    assert {m.value() for m in records} == expected  # the very bytes serialized at produce time
    assert len(records) == 49
