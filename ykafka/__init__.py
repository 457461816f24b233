"""ykafka: Kafka clients that operators steer live from a config center.

``from ykafka import Producer, Consumer`` replaces the confluent-kafka classes; everything else is
configuration that arrives through the MetaServer grant and Apollo namespaces.

Exports load lazily (PEP 562): ``import ykafka.catalog`` (the MetaServer, every Spark job) loads the shared
contracts only, never the client (confluent-kafka, the DR engine). See docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ykafka.consumer import Consumer
    from ykafka.errors import (
        AclDenied,
        AuthError,
        BrokerAuthError,
        BufferFullError,
        ClosedError,
        ConfigError,
        ForkedClientError,
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

_ERRORS = ("AclDenied", "AuthError", "BrokerAuthError", "BufferFullError", "ClosedError", "ConfigError",
           "ForkedClientError", "InvalidConfigValue", "KafkaError", "KafkaTimeoutError", "MessageTooLargeError",
           "MetaServerUnavailable",
           "SpillFullError", "ThrottledError", "UnknownClusterError", "UnknownConfigKey", "UnknownTopicError",
           "YKafkaError")
_EXPORTS = {"Consumer": "ykafka.consumer", "Producer": "ykafka.producer",
            "SerializingProducer": "ykafka.serializing", "DeserializingConsumer": "ykafka.serializing",
            **dict.fromkeys(_ERRORS, "ykafka.errors")}

__all__ = [
    "AclDenied", "AuthError", "BrokerAuthError", "BufferFullError", "ClosedError", "ConfigError", "Consumer",
    "DeserializingConsumer", "ForkedClientError", "InvalidConfigValue", "KafkaError", "KafkaTimeoutError",
    "MessageTooLargeError",
    "MetaServerUnavailable", "Producer", "SerializingProducer", "SpillFullError", "ThrottledError",
    "UnknownClusterError", "UnknownConfigKey", "UnknownTopicError", "YKafkaError", "__version__",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ykafka' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return __all__
