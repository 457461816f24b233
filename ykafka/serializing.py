"""``SerializingProducer`` / ``DeserializingConsumer``: confluent-kafka's serializing clients over ykafka's.

They take confluent-kafka's serializer and deserializer objects unchanged (``StringSerializer``,
``JSONSerializer``, ``AvroSerializer``, ``ProtobufSerializer`` and their builders, or any callable
``(obj, SerializationContext) -> bytes``), so a Schema Registry client an application already has keeps
working. Serialization happens before the message enters the producer: a message spilled to disk while a
cluster is down is stored as the bytes that were serialized and replayed as they are, never serialized again.

The builder handling (``key.serializer.builder`` ...) is confluent-kafka's own (``_serde_builder``), so the
rules match theirs exactly: a serde and its builder are mutually exclusive, built serdes are closed with
the client, ready-made ones stay the application's.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from ykafka.consumer import Consumer
from ykafka.consumer.client import is_async_handler
from ykafka.errors import ClosedError
from ykafka.producer import DeliveryCallback, Producer
from ykafka.transport import (
    ConsumeError,
    KeyDeserializationError,
    KeySerializationError,
    MessageField,
    SerializationContext,
    ValueDeserializationError,
    ValueSerializationError,
    serde_builder,
)

SERIALIZERS = ("key.serializer", "value.serializer")
DESERIALIZERS = ("key.deserializer", "value.deserializer")


class Serdes:
    """The key and value serdes of one client and the ones it owns (built from a ``.builder``)."""

    def __init__(self, serdes: list[Any], owned: list[Any]) -> None:
        self.key, self.value = serdes
        self.owned = owned

    @classmethod
    def build(cls, conf: Mapping[str, Any], props: tuple[str, str]) -> tuple[Serdes, dict[str, Any]]:
        specs, rest = serde_builder.pop_serde_props(dict(conf), *props)
        serdes, owned, rest = serde_builder.build_serdes(specs, rest)
        return cls(serdes, owned), rest

    @classmethod
    def around(cls, conf: Mapping[str, Any], props: tuple[str, str], init: Callable[[dict[str, Any]], None]) -> Serdes:
        """Build the serdes, then the client with the rest of ``conf`` (``init``); the serdes it built are
        closed again when the client cannot be created."""
        serdes, rest = cls.build(conf, props)
        try:
            init(rest)
        except BaseException:
            serdes.close()
            raise
        return serdes

    @classmethod
    async def build_async(cls, conf: Mapping[str, Any], props: tuple[str, str]) -> tuple[Serdes, dict[str, Any]]:
        specs, rest = serde_builder.pop_serde_props(dict(conf), *props)
        serdes, owned, rest = await serde_builder.async_build_serdes(specs, rest)
        return cls(serdes, owned), rest

    def close(self) -> None:
        owned, self.owned = self.owned, []
        serde_builder.close_serdes(owned)

    async def close_async(self) -> None:
        owned, self.owned = self.owned, []
        await serde_builder.async_close_serdes(owned)

    # -- producing ----------------------------------------------------------------------------------

    def serialize(self, topic: str, key: Any, value: Any, headers: Any) -> tuple[Any, Any]:
        ctx = SerializationContext(topic, MessageField.KEY, headers)
        if self.key is not None:
            try:
                key = self.key(key, ctx)
            except Exception as exc:
                raise KeySerializationError(exc) from exc
        ctx.field = MessageField.VALUE
        if self.value is not None:
            try:
                value = self.value(value, ctx)
            except Exception as exc:
                raise ValueSerializationError(exc) from exc
        return key, value

    async def serialize_async(self, topic: str, key: Any, value: Any, headers: Any) -> tuple[Any, Any]:
        ctx = SerializationContext(topic, MessageField.KEY, headers)
        if self.key is not None:
            try:
                key = await serde_builder.maybe_await(self.key(key, ctx))
            except Exception as exc:
                raise KeySerializationError(exc) from exc
        ctx.field = MessageField.VALUE
        if self.value is not None:
            try:
                value = await serde_builder.maybe_await(self.value(value, ctx))
            except Exception as exc:
                raise ValueSerializationError(exc) from exc
        return key, value

    # -- consuming ----------------------------------------------------------------------------------

    def deserialize(self, msg: Any) -> Any:
        """Deserialize a message's key, then value, in place (the key first, as confluent-kafka does)."""
        ctx = SerializationContext(msg.topic(), MessageField.KEY, msg.headers())
        key = msg.key()
        if self.key is not None:
            try:
                key = self.key(key, ctx)
            except Exception as exc:
                raise KeyDeserializationError(exception=exc, kafka_message=msg) from exc
        value = msg.value()
        if self.value is not None:
            ctx.field = MessageField.VALUE
            try:
                value = self.value(value, ctx)
            except Exception as exc:
                raise ValueDeserializationError(exception=exc, kafka_message=msg) from exc
        msg.set_key(key)
        msg.set_value(value)
        return msg

    async def deserialize_async(self, msg: Any) -> Any:
        ctx = SerializationContext(msg.topic(), MessageField.KEY, msg.headers())
        key = msg.key()
        if self.key is not None:
            try:
                key = await serde_builder.maybe_await(self.key(key, ctx))
            except Exception as exc:
                raise KeyDeserializationError(exception=exc, kafka_message=msg) from exc
        value = msg.value()
        if self.value is not None:
            ctx.field = MessageField.VALUE
            try:
                value = await serde_builder.maybe_await(self.value(value, ctx))
            except Exception as exc:
                raise ValueDeserializationError(exception=exc, kafka_message=msg) from exc
        msg.set_key(key)
        msg.set_value(value)
        return msg

    def handler(self, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Wrap a ``run`` handler so it receives deserialized messages (a failure goes to retry / DLQ)."""
        if is_async_handler(handler):
            async def run_async(msg: Any) -> Any:
                return await handler(await self.deserialize_async(msg))
            return run_async

        def run(msg: Any) -> Any:
            return handler(self.deserialize(msg))
        return run


class SerializingProducer(Producer):
    """Drop-in for confluent-kafka's ``SerializingProducer``: ``key.serializer`` / ``value.serializer`` (or
    their ``.builder``) in the config, then ``produce(topic, key=obj, value=obj)``."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._serdes = Serdes.around(conf, SERIALIZERS, super().__init__)

    def produce(self, topic: str, key: Any = None, value: Any = None, partition: int = -1,  # type: ignore[override]
                on_delivery: DeliveryCallback | None = None, timestamp: int = 0, headers: Any = None) -> None:
        """Serialize key and value, then send. Raises ``KeySerializationError`` / ``ValueSerializationError``
        (nothing sent) besides what :meth:`ykafka.Producer.produce` raises; after :meth:`close` a
        ``RuntimeError`` (:class:`ClosedError`) before the serializers run (they may register schemas)."""
        if self._closed:
            raise ClosedError("Producer has been closed")
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        key, value = self._serdes.serialize(topic, key, value, headers)
        super().produce(topic, value, key, partition, on_delivery, None, timestamp, headers)

    def close(self, timeout: float = 30.0) -> bool:
        """Close the producer, then the serdes it built; ``True`` as confluent-kafka's (messages left
        undelivered are logged by :meth:`ykafka.Producer.close`)."""
        super().close(timeout)
        self._serdes.close()
        return True


class DeserializingConsumer(Consumer):
    """Drop-in for confluent-kafka's ``DeserializingConsumer``: ``poll`` returns messages whose ``key()`` /
    ``value()`` are deserialized; ``run(handler)`` hands the handler deserialized messages."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._serdes = Serdes.around(conf, DESERIALIZERS, super().__init__)

    def poll(self, timeout: float | None = -1) -> Any:
        """Raises ``ConsumeError`` for an error event, ``Key/ValueDeserializationError`` for bad bytes."""
        msg = super().poll(timeout)
        if msg is None:
            return None
        error = msg.error()
        if error is not None:
            raise ConsumeError(error, kafka_message=msg)
        return self._serdes.deserialize(msg)

    def consume(self, num_messages: int = 1, timeout: float | None = -1) -> list[Any]:
        """Messages with an error are returned as they are (the rest of the batch is not lost)."""
        return [m if m.error() is not None else self._serdes.deserialize(m)
                for m in super().consume(num_messages, timeout)]

    def run(self, handler: Callable[[Any], Any], topics: Sequence[str] | None = None) -> None:
        if is_async_handler(handler):
            return Consumer.run_async(self, self._serdes.handler(handler), topics)
        return Consumer.run(self, self._serdes.handler(handler), topics)

    def run_async(self, handler: Callable[[Any], Coroutine[Any, Any, Any]],
                  topics: Sequence[str] | None = None, loop: Any = None) -> None:
        Consumer.run_async(self, self._serdes.handler(handler), topics, loop)

    def close(self) -> None:
        super().close()
        self._serdes.close()


def asyncinit(cls: Any) -> Any:
    """``obj = await Cls(...)`` for a class with an ``async def __init__`` (as confluent-kafka's async
    serializing clients are created)."""
    plain_new = cls.__new__

    async def init(obj: Any, *args: Any, **kwargs: Any) -> Any:
        await obj.__init__(*args, **kwargs)
        return obj

    def new(klass: Any, *args: Any, **kwargs: Any) -> Any:
        return init(plain_new(klass), *args, **kwargs)

    cls.__new__ = new
    return cls

