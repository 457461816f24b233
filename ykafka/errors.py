"""Typed errors of the ykafka user API.

Callers catch one family (``YKafkaError``) or a precise case; librdkafka error codes are mapped onto
this hierarchy by :func:`ykafka.transport.from_kafka_error` so transport details never leak as bare ``KafkaException``.
"""

from __future__ import annotations

from typing import Any


class YKafkaError(Exception):
    """Base of every error ykafka raises."""


class ConfigError(YKafkaError):
    """Local configuration is missing or malformed."""


class InvalidConfigValue(ConfigError):
    """A hot-config or local value failed validation against the key catalog."""

    def __init__(self, key: str, value: Any, reason: str) -> None:
        self.key = key
        self.value = value
        self.reason = reason
        super().__init__(f"invalid value {value!r} for {key}: {reason}")


class UnknownConfigKey(InvalidConfigValue):
    """A key that is not in the catalog."""

    def __init__(self, key: str, value: Any = None) -> None:
        super().__init__(key, value, "unknown key (not in the ykafka key catalog)")


class AuthError(YKafkaError):
    """The MetaServer refused the app's identity, or no valid grant is available."""


class MetaServerUnavailable(AuthError):
    """The MetaServer cannot be reached and no unexpired cached grant exists."""


class AclDenied(YKafkaError):
    """The app's grant does not allow this operation on this topic or group."""

    def __init__(self, app_id: str, operation: str, resource: str) -> None:
        self.app_id = app_id
        self.operation = operation
        self.resource = resource
        super().__init__(f"app {app_id!r} may not {operation} {resource!r} (not in its ACL)")


class UnknownClusterError(YKafkaError):
    """A route names a cluster that is not in the app's grant."""


class ThrottledError(YKafkaError):
    """A send waited longer than the throttle bound allows (``producer.rate.limit.*``)."""


class SpillFullError(YKafkaError):
    """The local spill queue reached its size cap; the message was not accepted."""


class KafkaError(YKafkaError):
    """An error reported by librdkafka, with its code and retriability preserved.

    Those mapped from librdkafka (:func:`ykafka.transport.from_kafka_error`) are also confluent-kafka's
    ``KafkaException`` wrapping the librdkafka error (``exc.args[0].code()``), so code written for
    confluent-kafka (``except KafkaException``) catches them unchanged. ``str()`` is the message.
    """

    def __init__(self, message: str, code: int | None = None, name: str | None = None,
                 retriable: bool = False, fatal: bool = False) -> None:
        self.code = code
        self.name = name
        self.retriable = retriable
        self.fatal = fatal
        self.message = message
        super().__init__(message)

    def __str__(self) -> str:
        return self.message


class BufferFullError(KafkaError, BufferError):
    """librdkafka's local queue is full (``queue.buffering.max.messages``); poll and retry.

    Also a ``BufferError``, so code written for confluent-kafka (``except BufferError: poll()``) still works.
    """


class BrokerAuthError(KafkaError):
    """A broker refused the app: its credentials (authentication) or its ACL bindings (authorization).

    The message names the app, the cluster and the topic or group when known, so a revoked or mis-granted
    app is told apart from a network problem at a glance.
    """

    def __init__(self, message: str, code: int | None = None, name: str | None = None, retriable: bool = False,
                 fatal: bool = False, app_id: str | None = None, cluster: str | None = None,
                 resource: str | None = None) -> None:
        self.app_id = app_id
        self.cluster = cluster
        self.resource = resource
        where = ", ".join(part for part in (f"app {app_id!r}" if app_id else "",
                                            f"cluster {cluster!r}" if cluster else "",
                                            f"topic/group {resource!r}" if resource else "") if part)
        super().__init__(f"broker refused {where or 'the client'}: {message}", code=code, name=name,
                         retriable=retriable, fatal=fatal)


class UnknownTopicError(KafkaError):
    """The topic does not exist on the cluster and is not auto-created."""


class MessageTooLargeError(KafkaError):
    """The message exceeds the broker's or client's size limit."""


class KafkaTimeoutError(KafkaError):
    """A request or delivery timed out."""


class ClosedError(YKafkaError, RuntimeError):
    """The client was closed and can no longer be used (a ``RuntimeError``, as confluent-kafka raises)."""


class ForkedClientError(ClosedError):
    """A client made before ``fork()`` was used in the child. librdkafka's handles and ykafka's threads do not
    survive a fork: the fix is to create the client in the child (gunicorn ``post_fork`` or a lazy global,
    Celery ``worker_process_init``, a ``multiprocessing`` initializer). A plain :class:`~ykafka.Producer` does
    that by itself; a Consumer (group membership) and the asyncio clients (their event loop) cannot."""
