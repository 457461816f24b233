"""The producer's per-client and per-topic state, the helpers its send path shares, and the attributes every
part of :class:`ykafka.producer.core.Producer` reads (:class:`ProducerBase`)."""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog

from ykafka import catalog
from ykafka.config import LocalConfig, Option
from ykafka.dr.link import DirectSender
from ykafka.dr.port import DrEngine
from ykafka.errors import BufferFullError
from ykafka.headers import MESSAGE_ID
from ykafka.observability import Observability
from ykafka.partitioner import Picker
from ykafka.runtime import Runtime
from ykafka.throttle import Throttle, Throttles
from ykafka.tracing import new_message_id
from ykafka.transport import (
    KafkaException,
    ProducerIdHastener,
    from_kafka_error,
)
from ykafka.transport import RawProducer as _RdProducer

log = structlog.get_logger(__name__)

DeliveryCallback = Callable[[Any, Any], None]
#: hook(err, msg, user_callback) -> True when it handled the report (the user callback is then not called)
DeliveryHook = Callable[[Any, Any, "DeliveryCallback | None"], bool]
#: hook(producer, client, topic, value, key, partition, on_delivery, timestamp, headers) -> True when it
#: took the message itself (e.g. spilled it); False to let it go to the client
SendHook = Callable[..., bool]

_RETIRED_GRACE_S = 1.0
_NOTHING = object()
_DR_RECHECK_S = 1.0  # a topic sent through the DR engine re-checks the direct path this often
_PENDING_MAX = 100_000
_CALLBACKS = ("on_delivery", "delivery.report.callback", "dr_cb", "dr_msg_cb", "error_cb", "stats_cb")


class _Client:
    """One librdkafka producer: a (cluster, settings) pair."""

    __slots__ = ("key", "cluster", "props", "rd", "retiring_since", "deadline", "abandoned", "drained_at",
                 "hastener")

    def __init__(self, key: tuple[Any, ...], cluster: str, props: dict[str, Any], rd: _RdProducer,
                 hastener: ProducerIdHastener | None = None) -> None:
        self.key = key
        self.cluster = cluster
        self.props = props
        self.rd = rd
        self.hastener = hastener  # its producer-id request, joined before the handle is closed
        self.retiring_since: float | None = None
        self.deadline = 0.0
        self.abandoned = False
        self.drained_at: float | None = None

    def describe(self) -> dict[str, Any]:
        shown = {k: v for k, v in self.props.items() if not callable(v) and "password" not in k}
        return {"cluster": self.cluster, "retiring": self.retiring_since is not None, "in_queue": len(self.rd),
                "settings": {k: shown[k] for k in ("acks", "enable.idempotence", "linger.ms", "batch.size",
                                                   "compression.type", "socket.send.buffer.bytes",
                                                   "max.in.flight.requests.per.connection") if k in shown}}


class _TopicState:
    """Everything a send to one topic needs, resolved once per config version."""

    __slots__ = ("topic", "client", "send", "send_reserved", "steps", "cluster", "effective", "picker",
                 "throttle", "held", "expires", "trace", "direct", "traced_pair", "fast")

    def __init__(self, topic: str, client: _Client, cluster: str, effective: dict[str, Any],
                 picker: Picker | None, throttle: Throttle | None, held: bool, expires: float,
                 trace: float = 0.0, direct: DirectSender | None = None) -> None:
        self.topic = topic
        self.client = client
        #: the send chain (ykafka/producer/chain.py), librdkafka's produce signature; until it is built, the client
        self.send: Callable[..., None] = client.rd.produce
        self.send_reserved: Callable[..., None] = client.rd.produce  # the chain without its throttle step
        self.steps: tuple[str, ...] = ()  # the chain's steps, outermost first (none: the client's produce)
        self.cluster = cluster
        self.effective = effective
        self.picker = picker
        self.throttle = throttle
        self.held = held  # a client swap holds the topic: its messages wait in order
        self.expires = expires
        self.trace = trace  # sampling rate of message trace (0.0: off)
        self.direct = direct  # the disaster-recovery engine's healthy-cluster path (None: engine off)
        # rate 1.0: (the last user callback, its traced wrapper), one attribute so that a send reads the pair in one
        # step (threads sending with different callbacks never see one's callback with the other's wrapper)
        self.traced_pair: tuple[Any, DeliveryCallback | None] = (_NOTHING, None)
        #: (direct sender, its client's produce) when the chain is the disaster-recovery direct step alone:
        #: ``Producer.produce`` takes that step inline (one Python frame less per send); set by chain.build
        #: (engine's direct sender, its client's produce, sampled trace rate or 0.0): Producer.produce inlines them
        self.fast: tuple[DirectSender, Callable[..., None], float] | None = None


def _freeze(props: Mapping[str, Any]) -> tuple[Any, ...]:
    out = []
    for name in sorted(props):
        value = props[name]
        try:
            hash(value)
        except TypeError:
            value = repr(value)
        out.append((name, value))
    return tuple(out)


_random = random.random
_next = next


def _with_header(headers: Any, name: str, value: str) -> list[tuple[str, Any]]:
    """A new header list with ``name: value`` added (the caller's headers are not modified)."""
    if not headers:
        return [(name, value)]
    items = list(headers.items()) if isinstance(headers, dict) else list(headers)
    items.append((name, value))
    return items


def _stamp_id(headers: Any) -> tuple[Any, str]:
    """The message's ``ykafka-id`` (kept when the caller set one), adding a new one when missing."""
    if headers:
        items = headers.items() if isinstance(headers, dict) else headers
        for name, value in items:
            if name == MESSAGE_ID and value:
                return headers, value.decode() if isinstance(value, bytes) else str(value)
    msg_id = new_message_id()
    return _with_header(headers, MESSAGE_ID, msg_id), msg_id


OPTIONS = (
    Option("ykafka.message.id", catalog.boolean, False,
           "stamp a unique ykafka-id header on every message (consumer de-duplication across retries and replays; "
           "costs the fast send path)", "YKAFKA_MESSAGE_ID"),
)


def queue_full(reason: str = "local queue full (queue.buffering.max.messages): poll() and retry") -> BufferFullError:
    """confluent-kafka's ``_QUEUE_FULL``, as a :class:`BufferFullError` (also a ``BufferError``)."""
    return BufferFullError(reason, code=-184, name="_QUEUE_FULL", retriable=True)


def send_error(exc: BufferError | KafkaException, app_id: str | None, cluster: str, topic: str) -> Exception:
    """The drop-in error of a send librdkafka refused: a full queue, or a refusal naming app, cluster and topic."""
    if isinstance(exc, BufferError):
        return queue_full()
    return from_kafka_error(exc, app_id=app_id, cluster=cluster, resource=topic)


def _nbytes(value: Any) -> int:
    if value is None:
        return 0
    try:
        return len(value)
    except TypeError:
        return 0


class ProducerBase(Protocol):
    """What the producer's parts (resolution, swaps, the send chain, the API) share: its state and the methods one
    part calls on another, declared once for the type checker. :class:`ykafka.producer.core.Producer` sets every
    attribute in ``__init__`` and implements every method; the parts are mixins over this protocol.
    """

    _conf: LocalConfig
    _lock: threading.RLock
    _states: dict[str, _TopicState]
    _clients: dict[tuple[Any, ...], _Client]
    _hastened: set[str]
    _retiring: list[_Client]
    _home: dict[str, _Client]
    _held: dict[str, _Client | None]
    _pending: deque[tuple[str, Any, Any, int, DeliveryCallback | None, int, Any]]
    _meta: dict[tuple[str, str], tuple[int, float]]
    _throttles: Throttles
    _send_hook: SendHook | None
    _delivery_hook: DeliveryHook | None
    _default_dr: DeliveryCallback | None
    _closed: bool
    _swaps: int
    _max_wait_s: float
    _swap_timeout_s: float
    _meta_ttl_s: float
    _stamp_ids: bool
    _dr: DrEngine | None
    _runtime: Runtime
    _obs: Observability
    _error_cbs: dict[tuple[str, Any], Callable[[Any], None]]

    def _prepare(self, topic: str) -> _TopicState: ...

    def _send(self, client: _Client, topic: str, value: Any, key: Any, partition: int,
              on_delivery: DeliveryCallback | None, timestamp: int, headers: Any) -> None: ...

    def _traced(self, st: _TopicState, key: Any, on_delivery: DeliveryCallback | None,
                headers: Any, msg_id: str | None = None) -> tuple[DeliveryCallback | None, Any]: ...

    def _error_cb(self, err: Any, cluster: str | None = None, username: Any = None) -> None: ...

    def _retire(self, client: _Client, reason: str) -> None: ...

    def _rebind_poll(self) -> None: ...
