"""The drop-in, hot-configurable Producer: ``from ykafka import Producer``.

:mod:`~ykafka.producer.core` holds the class and its confluent-kafka API; :mod:`~ykafka.producer.resolve`
resolves a topic (route, settings, client); :mod:`~ykafka.producer.chain` composes the topic's send chain (the
per-message steps it needs); :mod:`~ykafka.producer.swap` drains and closes retired clients;
:mod:`~ykafka.producer.state` holds the per-client / per-topic state they share and the protocol of their
shared attributes; :mod:`~ykafka.producer.aio_port` is what the asyncio producer uses beyond the drop-in API.
"""

from ykafka.producer.core import Producer
from ykafka.producer.state import DeliveryCallback, DeliveryHook, SendHook

__all__ = ["DeliveryCallback", "DeliveryHook", "SendHook", "Producer"]
