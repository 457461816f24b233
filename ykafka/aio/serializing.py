"""The asyncio serializing clients: ``await AsyncSerializingProducer(conf)`` /
``await AsyncDeserializingConsumer(conf)``, as confluent-kafka creates its own (their serdes and builders may
be asynchronous). Same serde rules as :mod:`ykafka.serializing`; blocking serdes run on the loop, so keep them
to the cheap kind, as confluent-kafka says of its own."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from ykafka.aio.consumer import AIOConsumer
from ykafka.aio.producer import AIOProducer, DeliveryCallback
from ykafka.errors import ClosedError
from ykafka.serializing import DESERIALIZERS, SERIALIZERS, Serdes, asyncinit
from ykafka.transport import ConsumeError


@asyncinit
class AsyncSerializingProducer(AIOProducer):
    """Drop-in for confluent-kafka's ``aio.AsyncSerializingProducer``."""

    async def __init__(self, conf: Mapping[str, Any], **kwargs: Any) -> None:  # type: ignore[misc]
        self._serdes, rest = await Serdes.build_async(conf, SERIALIZERS)
        try:
            AIOProducer.__init__(self, rest, **kwargs)
        except BaseException:
            await self._serdes.close_async()
            raise

    async def produce(self, topic: str, key: Any = None, value: Any = None,  # type: ignore[override]
                      partition: int = -1, timestamp: int = 0, headers: Any = None,
                      on_delivery: DeliveryCallback | None = None) -> Any:
        """Serialize, then :meth:`AIOProducer.produce`; returns the delivery future. After :meth:`close`
        a ``RuntimeError`` before the serializers run, as confluent-kafka's."""
        if self._closed:
            raise ClosedError("Producer has been closed")
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        key, value = await self._serdes.serialize_async(topic, key, value, headers)
        return await AIOProducer.produce(self, topic, value, key, partition, timestamp, headers, on_delivery)

    async def close(self, timeout: float = 30.0) -> int:
        left = await AIOProducer.close(self, timeout)
        await self._serdes.close_async()
        return left


@asyncinit
class AsyncDeserializingConsumer(AIOConsumer):
    """Drop-in for confluent-kafka's ``aio.AsyncDeserializingConsumer``."""

    async def __init__(self, conf: Mapping[str, Any], **kwargs: Any) -> None:  # type: ignore[misc]
        self._serdes, rest = await Serdes.build_async(conf, DESERIALIZERS)
        try:
            AIOConsumer.__init__(self, rest, **kwargs)
        except BaseException:
            await self._serdes.close_async()
            raise

    async def poll(self, timeout: float = -1) -> Any:
        msg = await AIOConsumer.poll(self, timeout)
        if msg is None:
            return None
        error = msg.error()
        if error is not None:
            raise ConsumeError(error, kafka_message=msg)
        return await self._serdes.deserialize_async(msg)

    async def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        msgs = await AIOConsumer.consume(self, num_messages, timeout)
        return [m if m.error() is not None else await self._serdes.deserialize_async(m) for m in msgs]

    async def run(self, handler: Callable[[Any], Coroutine[Any, Any, Any]],
                  topics: Sequence[str] | None = None) -> None:
        await AIOConsumer.run(self, self._serdes.handler(handler), topics)

    async def close(self) -> None:
        await AIOConsumer.close(self)
        await self._serdes.close_async()
