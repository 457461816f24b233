"""The transport seam: the one ykafka module that imports confluent_kafka.

Everything else in the SDK builds librdkafka clients, reads their errors and reports their versions
through here, so the client library can be pinned, patched or replaced in one place, and the contracts
(catalog, events, errors, signing, ACL, headers) import without it. See docs/architecture.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import confluent_kafka
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka import KafkaException, Message, TopicPartition
from confluent_kafka import Producer as RawProducer
from confluent_kafka import _serde_builder as serde_builder
from confluent_kafka.admin import AdminClient as RawAdminClient
from confluent_kafka.admin import NewTopic
from confluent_kafka.error import (
    ConsumeError,
    KeyDeserializationError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from confluent_kafka.serialization import MessageField, SerializationContext

from ykafka import errors

__all__ = [
    "ConsumeError", "KafkaException", "KeyDeserializationError", "KeySerializationError", "Message",
    "MessageField", "NewTopic", "RawAdminClient", "RawConsumer", "RawKafkaError", "RawProducer",
    "SerializationContext", "TopicPartition", "ValueDeserializationError", "ValueSerializationError",
    "close_producer", "from_kafka_error", "new_producer", "producers_built", "serde_builder", "versions",
]

#: (role, bootstrap.servers) -> librdkafka producer handles built in this process by :func:`new_producer`
_BUILT: Counter[tuple[str, str]] = Counter()


def new_producer(conf: Mapping[str, Any], role: str) -> RawProducer:
    """Build one librdkafka producer handle. The SDK's producers (the Producer's per-cluster clients
    ``"producer"``, the disaster-recovery engine's own ``"dr"``, the event sink's ``"events"``) are built here,
    so the handles a process made can be counted: :func:`producers_built`."""
    handle = RawProducer(dict(conf))
    _BUILT[(role, str(conf.get("bootstrap.servers") or conf.get("metadata.broker.list") or ""))] += 1
    return handle


def producers_built(reset: bool = False) -> dict[tuple[str, str], int]:
    """Handles built by :func:`new_producer` so far, per (role, bootstrap servers); ``reset`` starts over."""
    built = dict(_BUILT)
    if reset:
        _BUILT.clear()
    return built


def close_producer(producer: RawProducer) -> bool:
    """Release a drained producer's librdkafka handle (threads, broker connections) now, not when the garbage
    collector happens to reach it. One with messages still queued is left alone: ``close()`` would block
    until they are delivered. Returns whether it was closed."""
    try:
        if len(producer):
            return False
        return bool(producer.close())
    except RuntimeError:  # closed already
        return True


def versions() -> dict[str, str]:
    """ykafka / client library / librdkafka versions of this process (as in the client report)."""
    from ykafka import __version__

    ck = confluent_kafka.version()
    return {"ykafka": __version__, "confluent_kafka": ck if isinstance(ck, str) else ck[0],
            "librdkafka": confluent_kafka.libversion()[0]}


def from_kafka_error(err: Any) -> errors.KafkaError:
    """Map a librdkafka error (or a ``KafkaException`` wrapping one) to :mod:`ykafka.errors`."""
    if isinstance(err, KafkaException) and err.args:
        err = err.args[0]
    if not isinstance(err, RawKafkaError):
        return errors.KafkaError(str(err))
    code = err.code()
    kwargs: dict[str, Any] = {
        "code": code,
        "name": err.name(),
        "retriable": bool(err.retriable()),
        "fatal": bool(err.fatal()),
    }
    message = err.str()
    if code == RawKafkaError._QUEUE_FULL:
        return errors.BufferFullError(message, **kwargs)
    if code in (RawKafkaError._UNKNOWN_TOPIC, RawKafkaError.UNKNOWN_TOPIC_OR_PART):
        return errors.UnknownTopicError(message, **kwargs)
    if code == RawKafkaError.MSG_SIZE_TOO_LARGE:
        return errors.MessageTooLargeError(message, **kwargs)
    if code in (RawKafkaError._MSG_TIMED_OUT, RawKafkaError._TIMED_OUT, RawKafkaError.REQUEST_TIMED_OUT):
        return errors.KafkaTimeoutError(message, **kwargs)
    return errors.KafkaError(message, **kwargs)
