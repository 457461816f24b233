"""asyncio clients: ``from ykafka.aio import AIOProducer, AIOConsumer`` replaces confluent-kafka's ``aio``.

They are call styles over the one sync engine (hot config, routing, throttling, spill, failover, tracing,
reports): see docs/producer.md and docs/consumer.md.
"""

from __future__ import annotations

from ykafka.aio.consumer import AIOConsumer
from ykafka.aio.producer import AIOProducer
from ykafka.aio.serializing import AsyncDeserializingConsumer, AsyncSerializingProducer

__all__ = ["AIOConsumer", "AIOProducer", "AsyncDeserializingConsumer", "AsyncSerializingProducer"]
