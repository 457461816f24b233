"""The serializing producers (issue 32, item 12) and the plain clients after close() behave as
confluent-kafka's own.

Each check runs the same code against confluent-kafka's class and ykafka's (only the import differs) and
both must give the same outcome: the same return value, the same exception type, text or error code.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.aio
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.serialization import SerializationContext, StringSerializer

import ykafka
import ykafka.aio
from tests.helpers import unique

IMPLS = ("confluent", "ykafka")
DOWN = "127.0.0.1:1"  # nothing listens: these checks never reach a broker


def _sync(impl: str) -> Any:
    return confluent_kafka.SerializingProducer if impl == "confluent" else ykafka.SerializingProducer


def _async(impl: str) -> Any:
    return confluent_kafka.aio.AsyncSerializingProducer if impl == "confluent" \
        else ykafka.aio.AsyncSerializingProducer


def _conf(impl: str, tmp_path: Path, **conf: Any) -> dict[str, Any]:
    conf.setdefault("bootstrap.servers", DOWN)
    if impl == "ykafka":
        conf["ykafka.cache.dir"] = str(tmp_path / unique("cache"))
    return conf


class CountingSerializer(StringSerializer):
    """A real StringSerializer that counts the values it was given."""

    def __init__(self) -> None:
        super().__init__("utf_8")
        self.calls = 0
        self.closed = 0

    def __call__(self, obj: Any, ctx: SerializationContext | None = None) -> bytes | None:
        self.calls += 1
        return super().__call__(obj, ctx)

    def close(self) -> None:
        self.closed += 1


class Builder:
    """A ``value.serializer.builder``: builds a :class:`CountingSerializer` the client then owns."""

    def __init__(self) -> None:
        self.built: list[CountingSerializer] = []

    def build(self, conf: dict[str, Any], is_key: bool) -> tuple[CountingSerializer, dict[str, Any]]:
        serde = CountingSerializer()
        self.built.append(serde)
        return serde, conf


@pytest.mark.parametrize("impl", IMPLS)
def test_produce_after_close_raises_before_serializing_and_close_returns_true(impl: str, tmp_path: Path) -> None:
    serializer = CountingSerializer()
    producer = _sync(impl)(_conf(impl, tmp_path, **{"value.serializer": serializer}))
    assert producer.close() is True
    with pytest.raises(RuntimeError, match="^Producer has been closed$"):
        producer.produce("t", value="v")
    assert serializer.calls == 0
    assert serializer.closed == 0  # a ready-made serializer stays the application's


@pytest.mark.parametrize("impl", IMPLS)
def test_a_serializer_built_from_a_builder_is_closed_with_the_producer(impl: str, tmp_path: Path) -> None:
    builder = Builder()
    producer = _sync(impl)(_conf(impl, tmp_path, **{"value.serializer.builder": builder}))
    producer.close()
    assert [s.closed for s in builder.built] == [1]


@pytest.mark.parametrize("impl", IMPLS)
def test_an_unknown_property_raises_at_construction_and_closes_built_serializers(impl: str, tmp_path: Path) -> None:
    builder = Builder()
    with pytest.raises(KafkaException) as caught:
        _sync(impl)(_conf(impl, tmp_path, **{"value.serializer.builder": builder, "no.such.property": 1}))
    err = caught.value.args[0]
    assert (err.code(), err.str()) == (KafkaError._INVALID_ARG, 'No such configuration property: "no.such.property"')
    assert [s.closed for s in builder.built] == [1]


@pytest.mark.parametrize("impl", IMPLS)
def test_async_produce_after_close_raises_before_serializing(impl: str, tmp_path: Path) -> None:
    serializer = CountingSerializer()

    async def scenario() -> None:
        producer = await _async(impl)(_conf(impl, tmp_path, **{"value.serializer": serializer}))
        await producer.close()
        with pytest.raises(RuntimeError, match="^Producer has been closed$"):
            await producer.produce("t", value="v")

    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert serializer.calls == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_the_plain_clients_refuse_calls_after_close_with_confluent_kafkas_runtime_error(impl: str,
                                                                                     tmp_path: Path) -> None:
    lib = confluent_kafka if impl == "confluent" else ykafka
    producer = lib.Producer(_conf(impl, tmp_path))
    producer.close()
    with pytest.raises(RuntimeError, match="^Producer has been closed$"):
        producer.produce("t", b"v")
    consumer = lib.Consumer(_conf(impl, tmp_path, **{"group.id": unique("g")}))
    consumer.close()
    for call in (lambda: consumer.poll(0), lambda: consumer.subscribe(["t"]), lambda: consumer.assignment()):
        with pytest.raises(RuntimeError, match="^Consumer closed$"):
            call()
