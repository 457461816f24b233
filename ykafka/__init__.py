"""ykafka: Kafka clients that operators steer live from a config center.

``from ykafka import Producer, Consumer`` replaces the confluent-kafka classes; everything else is
configuration that arrives through the MetaServer grant and Apollo namespaces.
"""

from __future__ import annotations

from ykafka.consumer import Consumer
from ykafka.errors import (
    AclDenied,
    AuthError,
    BufferFullError,
    ClosedError,
    ConfigError,
    InvalidConfigValue,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    MetaServerUnavailable,
    SpillFullError,
    ThrottledError,
    UnknownClusterError,
    UnknownConfigKey,
    UnknownTopicError,
    YKafkaError,
)
from ykafka.producer import Producer
from ykafka.serializing import DeserializingConsumer, SerializingProducer

__version__ = "0.1.0"

__all__ = [
    "AclDenied",
    "AuthError",
    "BufferFullError",
    "ClosedError",
    "ConfigError",
    "Consumer",
    "DeserializingConsumer",
    "InvalidConfigValue",
    "KafkaError",
    "KafkaTimeoutError",
    "MessageTooLargeError",
    "MetaServerUnavailable",
    "Producer",
    "SerializingProducer",
    "SpillFullError",
    "ThrottledError",
    "UnknownClusterError",
    "UnknownConfigKey",
    "UnknownTopicError",
    "YKafkaError",
    "__version__",
]
