"""The transport seam: the one ykafka module that imports confluent_kafka.

Everything else in the SDK builds librdkafka clients, reads their errors and reports their versions
through here, so the client library can be pinned, patched or replaced in one place, and the contracts
(catalog, events, errors, signing, ACL, headers) import without it. See docs/architecture.md.
"""

from __future__ import annotations

import queue
import threading
import time
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
    "ProducerIdHastener", "close_producer", "from_kafka_error", "new_producer", "producers_built", "serde_builder",
    "versions", "warm_coordinators",
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


_SENTINEL = "ykafka.settings.checked"  # not a librdkafka property: refused last, after every real one


def check_settings(conf: Mapping[str, Any]) -> None:
    """Raise what confluent-kafka raises at construction for a bad setting (``KafkaException``,
    ``_INVALID_ARG``: "No such configuration property" or a bad value), without building a client:
    librdkafka takes the properties in order, so one that cannot exist, put last, is refused only once
    every real one was accepted."""
    try:
        RawProducer({**{k: v for k, v in conf.items() if k != _SENTINEL}, _SENTINEL: "1"})
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, RawKafkaError) and _SENTINEL in err.str():
            return
        raise from_kafka_error(exc) from None


class ProducerIdHastener:
    """Gets a new idempotent producer its producer id in ~50 ms instead of 500-1,000.

    librdkafka asks for the id on a 500 ms timer, and only from a broker that is up. The first check comes
    with the bootstrap metadata, when the bootstrap connection is being replaced by the broker's own
    (nothing is up), and nothing connects the partition leader before the timer's first tick does unless a
    request needs a broker: the id then comes at the second tick (docs/benchmarks.md, "Start-up"). One
    metadata request for the topic being sent, made from a background thread once the bootstrap answer is
    in, connects the leader (after librdkafka's ~50 ms connection suppression), and its answer runs the
    producer-id state machine at once. A second request covers a first one the bootstrap connection
    answered. Costs two metadata requests per new handle; a failure (cluster unreachable, handle closed)
    leaves it to the timer, as before.

    One worker thread per process serves every hastener in turn, started by :meth:`start_worker` (the
    Producer calls it when it is built: starting a thread waits until it runs, which under load takes
    milliseconds that must neither separate a handle from its first message nor hold the Producer's lock).
    Created before the handle is built, given it with :meth:`attach`; the owner calls :meth:`join` before
    closing the handle (a metadata call must not outlive its handle).
    """

    DELAYS_S = (0.01, 0.01)
    TIMEOUT_S = 0.5
    _jobs: queue.SimpleQueue[ProducerIdHastener] = queue.SimpleQueue()
    _worker: threading.Thread | None = None
    _worker_lock = threading.Lock()

    @classmethod
    def start_worker(cls) -> None:
        """Start the process's worker thread if it is not running."""
        if cls._worker is not None and cls._worker.is_alive():
            return
        with cls._worker_lock:
            if cls._worker is None or not cls._worker.is_alive():
                cls._worker = threading.Thread(target=cls._serve, name="ykafka-producer-id", daemon=True)
                cls._worker.start()

    @classmethod
    def _serve(cls) -> None:
        while True:
            job = cls._jobs.get()
            try:
                job._run()
            finally:
                job._done.set()

    def __init__(self, topic: str) -> None:
        self._topic = topic
        self._handle: RawProducer | None = None
        self._done = threading.Event()

    def attach(self, handle: RawProducer | None) -> None:
        """Hand over the built handle (None: the build failed, nothing is asked)."""
        if handle is None:
            self._done.set()
            return
        self._handle = handle
        self.start_worker()  # a no-op once the Producer started it
        self._jobs.put(self)

    def join(self, timeout: float | None = None) -> None:
        """Stop (no further request) and wait for a request in flight (bounded by its timeout)."""
        self._handle = None
        if self._worker is None:
            return
        self._done.wait(timeout if timeout is not None else sum(self.DELAYS_S) + 2 * self.TIMEOUT_S + 1.0)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _run(self) -> None:
        for delay in self.DELAYS_S:
            time.sleep(delay)
            handle = self._handle
            if handle is None:
                return
            try:
                handle.list_topics(self._topic, timeout=self.TIMEOUT_S)
            except Exception:  # unreachable, closed: the producer-id timer gets there on its own
                return


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


_AUTH_CODES = frozenset(getattr(RawKafkaError, name) for name in (
    "_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "DELEGATION_TOKEN_AUTHORIZATION_FAILED"))


def is_auth_error(err: Any) -> bool:
    """Whether a librdkafka error is a broker refusing the client's credentials or ACL."""
    if isinstance(err, KafkaException) and err.args:
        err = err.args[0]
    return isinstance(err, RawKafkaError) and err.code() in _AUTH_CODES


def from_kafka_error(err: Any, *, app_id: str | None = None, cluster: str | None = None,
                     resource: str | None = None) -> errors.KafkaError:
    """Map a librdkafka error (or a ``KafkaException`` wrapping one) to :mod:`ykafka.errors`; a broker's
    authentication or authorization refusal becomes :class:`~ykafka.errors.BrokerAuthError` naming the app,
    cluster and topic given. The result is also confluent-kafka's ``KafkaException`` wrapping the librdkafka
    error (``exc.args[0].code()``), so code written for confluent-kafka catches it unchanged."""
    if isinstance(err, errors.KafkaError):  # already mapped
        return err
    if isinstance(err, KafkaException) and err.args:
        err = err.args[0]
    if not isinstance(err, RawKafkaError):
        return errors.KafkaError(str(err))
    code = err.code()
    kwargs: dict[str, Any] = {
        "code": code,
        "name": err.name(),
        "retriable": bool(err.retriable()),
        "fatal": bool(err.fatal()) or code == RawKafkaError._FATAL,
    }
    cls: type[errors.KafkaError] = errors.KafkaError
    if code in _AUTH_CODES:
        cls = errors.BrokerAuthError
        kwargs.update(app_id=app_id, cluster=cluster, resource=resource)
    elif code == RawKafkaError._QUEUE_FULL:
        cls = errors.BufferFullError
    elif code in (RawKafkaError._UNKNOWN_TOPIC, RawKafkaError.UNKNOWN_TOPIC_OR_PART):
        cls = errors.UnknownTopicError
    elif code == RawKafkaError.MSG_SIZE_TOO_LARGE:
        cls = errors.MessageTooLargeError
    elif code in (RawKafkaError._MSG_TIMED_OUT, RawKafkaError._TIMED_OUT, RawKafkaError.REQUEST_TIMED_OUT):
        cls = errors.KafkaTimeoutError
    mapped = _DROP_IN[cls](err.str(), **kwargs)
    mapped.args = (err,)  # as confluent-kafka's KafkaException: args[0] is the librdkafka error
    return mapped


def _drop_in(cls: type[errors.KafkaError]) -> type[errors.KafkaError]:
    """``cls`` that is also confluent-kafka's ``KafkaException`` (ykafka.errors stays free of the client)."""

    def __reduce__(self: errors.KafkaError) -> Any:  # pickles as the plain ykafka error (its message)
        return errors.KafkaError, (self.message, self.code, self.name, self.retriable, self.fatal)

    return type(cls.__name__, (cls, KafkaException), {"__module__": __name__, "__reduce__": __reduce__})


_DROP_IN = {cls: _drop_in(cls) for cls in (errors.KafkaError, errors.BrokerAuthError, errors.BufferFullError,
                                            errors.UnknownTopicError, errors.MessageTooLargeError,
                                            errors.KafkaTimeoutError)}


def warm_coordinators(conf: Mapping[str, Any], timeout_s: float = 60.0) -> bool:
    """Wait until a freshly formatted Kafka cluster hands out producer ids and answers a group lookup.

    Until then the first idempotent producer logs ``Coordinator load in progress`` retries (what a user saw on
    the quickstart's first run after ``ykafka dev up``) and a consumer's first poll can raise
    NOT_COORDINATOR. The probes log nowhere; True when both answered within ``timeout_s``."""
    import json
    import logging

    quiet = logging.getLogger("ykafka.transport.warmup")
    if not quiet.handlers:
        quiet.propagate = False
        quiet.addHandler(logging.NullHandler())
    state: dict[str, Any] = {}
    deadline = time.monotonic() + timeout_s
    producer = RawProducer({**conf, "enable.idempotence": True, "statistics.interval.ms": 100, "logger": quiet,
                            "stats_cb": lambda raw: state.update(json.loads(raw).get("eos") or {})})
    try:
        while state.get("idemp_state") != "Assigned":
            if time.monotonic() > deadline:
                return False
            producer.poll(0.05)
    finally:
        close_producer(producer)
    # the group lookup through a consumer's committed(), not AdminClient.describe_consumer_groups: librdkafka's
    # coordinator admin requests can abort the whole process when a connection drops under them (librdkafka
    # issue 4605, open in 2.16; docs/architecture.md "Coordinator admin requests"); it aborted the test run twice
    # on a loaded machine while a three-node cluster started
    consumer = RawConsumer({**conf, "group.id": "ykafka-warmup", "enable.auto.commit": False, "logger": quiet})
    try:
        while True:
            try:
                consumer.committed([TopicPartition("__ykafka_warmup", 0)], timeout=5)
                return True
            except KafkaException:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.1)
    finally:
        consumer.close()
