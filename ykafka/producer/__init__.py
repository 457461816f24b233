"""The drop-in, hot-configurable Producer: ``from ykafka import Producer``.

:mod:`~ykafka.producer.core` holds the class and its confluent-kafka API; :mod:`~ykafka.producer.resolve`
resolves a topic (route, settings, client); :mod:`~ykafka.producer.swap` drains and closes retired clients;
:mod:`~ykafka.producer.state` holds the per-client / per-topic state they share.
"""

from ykafka.producer.core import Producer
from ykafka.producer.state import DeliveryCallback, DeliveryHook, SendHook

__all__ = ["DeliveryCallback", "DeliveryHook", "SendHook", "Producer"]
