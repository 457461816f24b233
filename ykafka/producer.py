"""The drop-in, hot-configurable Producer: ``from ykafka import Producer``.

Same call shapes as confluent-kafka's ``Producer`` (``produce``, ``poll``, ``flush``, ``len()``, ``purge``,
``list_topics``), plus identity in the config. Everything operators change live arrives through the
:class:`~ykafka.runtime.Runtime` (MetaServer grant + Apollo namespaces) and is applied here:

* per topic, a cached :class:`_TopicState` (ACL decision, route, librdkafka client, partition picker,
  throttle) is dropped whenever the runtime's version moves and rebuilt on that topic's next ``produce``;
  the hot path is one dict lookup and the librdkafka call;
* ONE librdkafka producer per (cluster, effective librdkafka settings), shared by every topic on it;
* a topic whose client changes (a rebuild key such as ``producer.acks``, or ``route.cluster``) is *held*:
  its new messages wait in order in a local queue until every message it sent on the old client is
  delivered, then go to the new client. The old client is retired as a whole (its other topics move to a
  fresh client with the same settings) because librdkafka cannot tell per-topic queue depth; the
  drain is driven by the user's own ``poll()`` / ``flush()`` so delivery callbacks fire there, exactly as
  with confluent-kafka, whatever client delivered.

Seam for spill / failover: :meth:`Producer._send` is the one place a message is handed to a cluster's
librdkafka client and :meth:`Producer._delivered` the one place delivery reports come back when a hook is
installed (:meth:`Producer.set_hooks`). Without hooks the hot path inlines ``_send`` for speed.
"""

from __future__ import annotations

import contextlib
import functools
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from ykafka import catalog
from ykafka.catalog import Scope, ScopeKind
from ykafka.config import LocalConfig, register_option
from ykafka.config import load as load_config
from ykafka.dr import attach as dr_attach  # registers the ykafka.spill.* / ykafka.dr.* options
from ykafka.dr.engine import DisasterRecovery
from ykafka.dr.link import DirectSender, bind_report
from ykafka.errors import BufferFullError, ClosedError, ConfigError
from ykafka.headers import MESSAGE_ID, TRACE_ID
from ykafka.hotconfig import ConfigChange
from ykafka.metrics import Observability
from ykafka.partitioner import Picker, needs_python
from ykafka.runtime import Runtime
from ykafka.throttle import Throttle, Throttles
from ykafka.tracing import Tracer, new_message_id
from ykafka.transport import (
    KafkaException,
    ProducerIdHastener,
    check_settings,
    close_producer,
    from_kafka_error,
    new_producer,
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
                                                   "compression.type", "socket.send.buffer.bytes") if k in shown}}


class _TopicState:
    """Everything a send to one topic needs, resolved once per config version."""

    __slots__ = ("topic", "client", "send", "cluster", "effective", "picker", "throttle", "slow", "expires",
                 "trace", "direct", "traced_for", "traced")

    def __init__(self, topic: str, client: _Client, cluster: str, effective: dict[str, Any],
                 picker: Picker | None, throttle: Throttle | None, slow: bool, expires: float,
                 trace: float = 0.0, direct: DirectSender | None = None) -> None:
        self.topic = topic
        self.client = client
        self.send = client.rd.produce
        self.cluster = cluster
        self.effective = effective
        self.picker = picker
        self.throttle = throttle
        self.slow = slow
        self.expires = expires
        self.trace = trace  # sampling rate of message trace (0.0: off)
        self.direct = direct  # the disaster-recovery engine's healthy-cluster path (None: engine off)
        self.traced_for: Any = _NOTHING  # rate 1.0: the last user callback and its traced wrapper
        self.traced: DeliveryCallback | None = None


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


register_option("ykafka.message.id", catalog.boolean, False,
                "stamp a unique ykafka-id header on every message (consumer de-duplication across retries and "
                "replays; costs the fast send path)", "YKAFKA_MESSAGE_ID")


def _nbytes(value: Any) -> int:
    if value is None:
        return 0
    try:
        return len(value)
    except TypeError:
        return 0


class Producer:
    """A confluent-kafka-compatible producer whose behaviour operators change live.

    ``Producer({"ykafka.app.id": ..., "ykafka.app.secret": ..., "ykafka.metaserver": ...})`` or, in local
    mode, ``Producer({"bootstrap.servers": ...})``. Raises :class:`ConfigError` for a bad local config,
    :class:`AuthError` / :class:`MetaServerUnavailable` when no grant can be had.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(config or {})
        merged.update(kwargs)
        self._conf: LocalConfig = load_config(merged, "producer")
        rd = self._conf.rdkafka
        self._user_error_cb: Callable[[Any], None] | None = rd.get("error_cb")
        self._default_dr: DeliveryCallback | None = rd.get("on_delivery") or rd.get("delivery.report.callback")
        if "partitioner" in rd:
            log.warning("ykafka.producer.partitioner_overridden", given=rd["partitioner"],
                        reason="partitioning follows producer.partitioner (murmur2 = Java-compatible)")
        self._lock = threading.RLock()
        self._states: dict[str, _TopicState] = {}
        self._clients: dict[tuple[Any, ...], _Client] = {}
        self._hastened: set[str] = set()  # clusters whose first client got a ProducerIdHastener
        self._retiring: list[_Client] = []
        self._home: dict[str, _Client] = {}  # topic -> client its last messages went to
        self._held: dict[str, _Client | None] = {}  # topic -> client it waits for (None: pending to send)
        self._pending: deque[tuple[str, Any, Any, int, DeliveryCallback | None, int, Any]] = deque()
        self._meta: dict[tuple[str, str], tuple[int, float]] = {}
        self._throttles = Throttles()
        self._send_hook: SendHook | None = None
        self._delivery_hook: DeliveryHook | None = None
        self._closed = False
        self._closed_routes: dict[str, str] = {}
        self._swaps = 0
        self._max_wait_s = self._conf.ms("ykafka.throttle.max.wait.ms")
        self._swap_timeout_s = self._conf.ms("ykafka.swap.timeout.ms")
        self._meta_ttl_s = self._conf.ms("ykafka.metadata.refresh.ms")
        self._stamp_ids = bool(self._conf.get("ykafka.message.id"))
        self._dr: DisasterRecovery | None = None
        self._error_listeners: list[Callable[[Any], None]] = []
        ProducerIdHastener.start_worker()  # here, not on the first send (see the class)
        # what is started here is stopped by close() in reverse order, every step even when one fails; a
        # failure while starting unwinds what was started before it
        with contextlib.ExitStack() as exit_stack:
            self._runtime = Runtime(self._conf)
            exit_stack.callback(self._runtime.close)
            self._runtime.start()
            local_route = self._conf.catalog_defaults.get("route.cluster")
            if local_route is not None and local_route not in self._runtime.clusters():
                raise ConfigError(f"route.cluster {local_route!r} is not a known cluster "
                                  f"({', '.join(sorted(self._runtime.clusters()))})")
            # a bad local setting raises here (KafkaException), as confluent-kafka's does, not at a first send
            cluster = self._runtime.default_cluster
            check_settings(self._settings(cluster, self._runtime.effective(cluster=cluster)))
            self._runtime.add_version_listener(self._on_version)
            self._runtime.set_report_provider(self._report)
            self._runtime.hot.add_scoped_validator(self._check_partitions)
            self._obs = Observability(self._runtime, "producer")  # trace events, statistics, client events
            exit_stack.callback(self._obs.close)
            exit_stack.callback(self._close_clients)
            if self._conf.get("ykafka.dr.enabled"):  # spill, replay, dual-DC failover (docs/architecture.md)
                self._dr = dr_attach.attach(self)  # installs the send hook through the ProducerPort (dr/port.py)
                exit_stack.callback(self._dr.close, 1.0)  # what is still spilled stays on disk for the next start
                self._dr.on_change.append(self._dr_changed)  # a link went down / up, a route moved
                self._dr.mailbox.on_mail = self._unbind_poll  # callbacks from its threads: served by poll()
            if any(callable(rd.get(name)) for name in ("error_cb", "stats_cb", "throttle_cb")):
                # confluent-kafka's producer is up (connecting, reporting errors and statistics) once created;
                # an application that listens for those gets the default cluster's client now, not at a first send
                self._default_client()
            self._exit = exit_stack.pop_all()

    # --- the hot path ------------------------------------------------------------------------------

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: DeliveryCallback | None = None, callback: DeliveryCallback | None = None,
                timestamp: int = 0, headers: Any = None) -> None:
        """Send a message asynchronously; same arguments and errors as confluent-kafka's ``produce``.

        Raises :class:`AclDenied` (topic outside the grant; nothing sent), :class:`ThrottledError`,
        :class:`BufferFullError` (also a ``BufferError``), :class:`ClosedError`, or a mapped
        :class:`KafkaError`.
        """
        st = self._states.get(topic)
        if on_delivery is None:
            on_delivery = callback
        if st is None or st.slow:
            return self._produce_slow(topic, value, key, partition, on_delivery, timestamp, headers)
        direct = st.direct
        if direct is not None and partition >= 0:  # the direct path takes unpinned sends only (see below)
            return self._produce_slow(topic, value, key, partition, on_delivery, timestamp, headers)
        rate = st.trace
        if rate:
            if on_delivery is st.traced_for:  # rate 1.0, same callback as the last send: its traced twin
                on_delivery = st.traced
            elif rate >= 1.0 or _random() < rate:  # sampled: decided once, here
                on_delivery, headers = self._traced(st, key, on_delivery, headers)
        if direct is not None:  # disaster recovery on, cluster healthy: straight to the client; a failure
            if on_delivery is None:  # comes back to the engine through the callback (DirectSender)
                on_delivery = self._default_dr
            if key is not None:  # its produce order rides along: a key's re-routed messages stay in order
                on_delivery = bind_report((direct, on_delivery, _next(direct.order)))
            elif on_delivery is direct.last_cb:
                on_delivery = direct.last_shared
            else:
                on_delivery = direct.shared(on_delivery)
        try:
            st.send(topic, value, key, partition, on_delivery, None, timestamp, headers)
        except BufferError:
            raise BufferFullError("local queue full (queue.buffering.max.messages): poll() and retry",
                                  code=-184, name="_QUEUE_FULL", retriable=True) from None
        except KafkaException as exc:  # a broker's refusal names the app, cluster and topic
            raise from_kafka_error(exc, app_id=self._runtime.app_id, cluster=st.cluster, resource=topic) from None

    def _produce_slow(self, topic: str, value: Any, key: Any, partition: int,
                      on_delivery: DeliveryCallback | None, timestamp: int, headers: Any,
                      prepaid: bool = False) -> None:
        if self._closed:
            raise ClosedError("producer is closed")
        if not isinstance(topic, str) or not topic:
            raise TypeError("topic must be a non-empty str")
        st = self._states.get(topic)
        if st is None or (st.expires and time.monotonic() > st.expires):
            st = self._prepare(topic)
        msg_id = None
        if self._stamp_ids:  # ykafka.message.id: a stable id for consumer-side de-duplication
            headers, msg_id = _stamp_id(headers)
        rate = st.trace
        if rate:
            if msg_id is not None:  # sampled by a hash of its id: every process decides the same
                if Tracer.sampled(msg_id, rate):
                    on_delivery, headers = self._traced(st, key, on_delivery, headers, msg_id)
            elif rate >= 1.0 or _random() < rate:
                on_delivery, headers = self._traced(st, key, on_delivery, headers)
        if st.throttle is not None and not prepaid:
            st.throttle.acquire(_nbytes(value))
        if partition < 0 and st.picker is not None:
            partition = st.picker(key)
        if topic in self._held:
            with self._lock:
                if topic in self._held:
                    if len(self._pending) >= _PENDING_MAX:
                        raise BufferFullError("local queue full while a client swap drains: poll() and retry",
                                              code=-184, name="_QUEUE_FULL", retriable=True)
                    self._pending.append((topic, value, key, partition, on_delivery, timestamp, headers))
                    return
            st = self._states.get(topic) or self._prepare(topic)
        self._send(st.client, topic, value, key, partition, on_delivery, timestamp, headers)

    # --- the asyncio seam (ykafka/aio): never block the caller's event loop ---------------------------

    def ready(self, topic: str) -> bool:
        """Whether a send to ``topic`` runs without blocking: its routing, client and settings are resolved
        (no grant check, metadata fetch or client build pending) and it is not held by a client swap (whose
        release sends under the producer's lock), nor waiting for a disaster-recovery hand-over (a route that
        just moved between clusters). The asyncio producer sends such messages on the event loop and hands the
        others to a thread."""
        st = self._states.get(topic)
        return st is not None and not (st.expires and time.monotonic() > st.expires) and topic not in self._held \
            and (st.direct is not None or self._dr is None or not self._dr.handing_over(topic))

    def reserve(self, topic: str, value: Any) -> float:
        """Take a send's throttle tokens now and return how long it must wait before :meth:`produce_reserved`
        (0 when ``topic`` is not throttled). Raises :class:`ThrottledError` as :meth:`produce` would."""
        st = self._states.get(topic)
        if st is None or (st.expires and time.monotonic() > st.expires):
            st = self._prepare(topic)
        return st.throttle.reserve(_nbytes(value)) if st.throttle is not None else 0.0

    def produce_reserved(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                         on_delivery: DeliveryCallback | None = None, timestamp: int = 0, headers: Any = None) -> None:
        """:meth:`produce` for a send whose throttle tokens :meth:`reserve` already took."""
        st = self._states.get(topic)
        if st is None or st.throttle is None:
            return self.produce(topic, value, key, partition, on_delivery, None, timestamp, headers)
        return self._produce_slow(topic, value, key, partition, on_delivery, timestamp, headers, prepaid=True)

    def _traced(self, st: _TopicState, key: Any, on_delivery: DeliveryCallback | None,
                headers: Any, msg_id: str | None = None) -> tuple[DeliveryCallback | None, Any]:
        """Message trace of a message sampled by the caller (one ``random()`` against the topic's rate): it
        gets its trace header and a delivery callback emitting its produced / acked (or failed) steps."""
        tracer = self._obs.tracer()
        if not tracer.active:
            return on_delivery, headers
        if msg_id is not None:  # its ykafka-id is the trace id: no ykafka-trace header needed
            return tracer.wrap_delivery(on_delivery or self._default_dr, st.topic, key, msg_id, st.cluster), headers
        if st.trace >= 1.0:  # identified by its coordinates once acked: no header, one shared callback
            wrapped = tracer.wrap_delivery(on_delivery or self._default_dr, st.topic, key, "", st.cluster)
            st.traced_for, st.traced = on_delivery, wrapped  # the next send with this callback skips all this
            return wrapped, headers
        mid = new_message_id()
        headers = _with_header(headers, TRACE_ID, mid)
        return tracer.wrap_delivery(on_delivery or self._default_dr, st.topic, key, mid, st.cluster), headers

    def _send(self, client: _Client, topic: str, value: Any, key: Any, partition: int,
              on_delivery: DeliveryCallback | None, timestamp: int, headers: Any) -> None:
        """THE place a message is handed to a cluster's librdkafka client (spill / failover seam)."""
        hook = self._send_hook
        try:
            if hook is not None and hook(self, client, topic, value, key, partition, on_delivery, timestamp,
                                         headers):
                return
            if self._delivery_hook is not None:
                on_delivery = functools.partial(self._delivered, on_delivery or self._default_dr)
            client.rd.produce(topic, value, key, partition, on_delivery, None, timestamp, headers)
        except BufferError:
            raise BufferFullError("local queue full (queue.buffering.max.messages): poll() and retry",
                                  code=-184, name="_QUEUE_FULL", retriable=True) from None
        except KafkaException as exc:
            raise from_kafka_error(exc, app_id=self._runtime.app_id, cluster=client.cluster, resource=topic) from None

    def _delivered(self, user_callback: DeliveryCallback | None, err: Any, msg: Any) -> None:
        """THE place delivery reports come back when a delivery hook is installed."""
        hook = self._delivery_hook
        if hook is not None and hook(err, msg, user_callback):
            return
        if user_callback is not None:
            user_callback(err, msg)

    def set_hooks(self, send: SendHook | None = None, delivery: DeliveryHook | None = None) -> None:
        """Install the spill / failover hooks (``None`` removes one); every send then goes through ``_send``."""
        with self._lock:
            self._send_hook = send
            self._delivery_hook = delivery
            self._states.clear()
            self._rebind_poll()

    # --- resolving a topic -------------------------------------------------------------------------

    def _on_version(self, version: int) -> None:
        self._states.clear()

    def _prepare(self, topic: str) -> _TopicState:
        rt = self._runtime
        rt.check_acl("produce", topic)
        rt.subscribe(topic=topic)
        with self._lock:
            version = rt.version
            cluster = rt.route(topic=topic)
            rt.subscribe(cluster=cluster)
            effective = rt.effective(topic=topic, cluster=cluster)
            props = self._client_props(cluster, effective)
            key = (cluster, _freeze(props))
            client = self._clients.get(key)
            if client is None:
                if self._dr is not None and self._dr.target(topic) == cluster:
                    # open the cluster's disaster-recovery link (its spill queue on disk: ~35 ms) BEFORE the
                    # librdkafka handle, so the first message follows the handle within a millisecond: an
                    # idempotent handle only connects to the partition leader before its first producer-id
                    # tick (500 ms) when a message arrives before the bootstrap metadata does; later, the
                    # first ack costs two ticks (docs/benchmarks.md, "Start-up")
                    self._dr.link(cluster)
                client = self._new_client(key, cluster, props, topic)
            home = self._home.get(topic)
            if home is not None and home is not client and self._held.get(topic) is None:
                # the topic moves to another client (or moves again while its held messages were being
                # released): what it already sent on the old one must be delivered before anything goes to
                # the new one, so it is held (its pending messages stay queued, in order) until that drained
                if home.retiring_since is None:
                    self._retire(home, reason=f"topic {topic} moves to {cluster}")
                if home.drained_at is None:
                    self._held[topic] = home
                    log.info("ykafka.producer.topic_held", topic=topic, old_cluster=home.cluster,
                             new_cluster=cluster, in_queue=len(home.rd))
            if self._held.get(topic) is None:  # not held, or its held messages are being released now
                self._home[topic] = client
            picker: Picker | None = None
            expires = 0.0
            strategy = effective["producer.partitioner"]
            exclude = effective["producer.partitions.exclude"]
            if needs_python(strategy, exclude):
                count = self._partition_count(client, topic)
                picker = Picker(strategy, count, exclude)
                expires = time.monotonic() + (self._meta_ttl_s if count else 1.0)
            throttle = self._throttles.for_topic(effective, rt.sources(topic=topic, cluster=cluster), self._max_wait_s)
            direct = None
            dr_epoch = 0
            if (self._dr is not None and self._delivery_hook is None and picker is None and throttle is None
                    and topic not in self._held):
                dr_epoch = self._dr.epoch
                direct = self._dr.direct(topic, cluster, client.rd)
                if direct is None:  # spilling, failed over, draining: through the engine; re-checked soon
                    expires = min(expires or float("inf"), time.monotonic() + _DR_RECHECK_S)
            slow = (picker is not None or throttle is not None or topic in self._held or self._stamp_ids
                    or (self._send_hook is not None and direct is None) or self._delivery_hook is not None)
            state = _TopicState(topic, client, cluster, effective, picker, throttle, slow, expires,
                                Tracer.rate(effective), direct)
            if rt.version == version and not self._closed and (self._dr is None or self._dr.epoch == dr_epoch
                                                                or direct is None):
                self._states[topic] = state
            return state

    def _settings(self, cluster: str, effective: Mapping[str, Any]) -> dict[str, Any]:
        """librdkafka settings from the catalog's ``producer.*`` keys over the cluster's and the local ones."""
        props = self._runtime.rdkafka_config(cluster, catalog.rdkafka_properties(effective, "producer."))
        props["partitioner"] = "murmur2_random"  # keyed partitioning (Java-compatible murmur2)
        return props

    def client_settings(self, cluster: str) -> dict[str, Any]:
        """The librdkafka settings of a producer on ``cluster`` without callbacks (the DR engine's own
        standby / replay clients start from these)."""
        props = self._settings(cluster, self._runtime.effective(cluster=cluster))
        for name in _CALLBACKS:
            props.pop(name, None)
        return props

    def _client_props(self, cluster: str, effective: Mapping[str, Any]) -> dict[str, Any]:
        props = self._settings(cluster, effective)
        props["error_cb"] = self._error_cb
        self._obs.add_statistics(props)  # statistics -> __ykafka_metrics (beside the application's stats_cb)
        if self._conf.get("ykafka.dr.enabled"):  # not delivered this long while unreachable: spilled
            props["message.timeout.ms"] = max(effective["spill.after.ms"], effective["producer.linger.ms"] + 1000)
        return props

    def _new_client(self, key: tuple[Any, ...], cluster: str, props: dict[str, Any],
                    topic: str | None = None) -> _Client:
        hastener = None
        if (topic is not None and cluster not in self._hastened
                and str(props.get("enable.idempotence", "")).lower() in ("true", "1")):
            # a cluster's first client (start-up): its producer id in ~50 ms, not 500-1,000 (see the class).
            # The clients of later swaps keep librdkafka's timer, as before (docs/benchmarks.md, "Start-up")
            self._hastened.add(cluster)
            hastener = ProducerIdHastener(topic)
        rd: _RdProducer | None = None
        try:
            rd = new_producer(props, "producer")
        except KafkaException as exc:
            raise ConfigError(f"librdkafka refused the producer settings for cluster {cluster}: "
                              f"{from_kafka_error(exc)}") from None
        finally:
            if hastener is not None:
                hastener.attach(rd)  # None when the build failed: nothing to ask
        client = _Client(key, cluster, props, rd, hastener)
        self._clients[key] = client
        log.info("ykafka.producer.client_created", **client.describe())
        self._rebind_poll()
        self._runtime.report_now()
        return client

    def _retire(self, client: _Client, reason: str) -> None:
        """Stop sending on ``client``; it drains through poll()/flush(), then is closed."""
        if self._clients.get(client.key) is client:
            del self._clients[client.key]
        client.retiring_since = time.monotonic()
        client.deadline = client.retiring_since + self._swap_timeout_s
        self._retiring.append(client)
        self._states.clear()
        self._swaps += 1
        log.info("ykafka.producer.client_retiring", reason=reason, **client.describe())
        self._rebind_poll()

    def _check_partitions(self, scope: Scope, name: str, value: Any) -> tuple[str, Any] | None:
        """``producer.partitions.exclude`` naming partitions the topic lacks: reject those, apply the rest."""
        if name != "producer.partitions.exclude" or scope.kind is not ScopeKind.TOPIC or not value:
            return None
        counts = [count for (_, topic), (count, _) in list(self._meta.items()) if topic == scope.name]
        home = self._home.get(scope.name)
        if not counts and home is not None:
            counts = [self._partition_count(home, scope.name)]
        count = min((c for c in counts if c), default=0)
        missing = [p for p in value if p >= count]
        if not count or not missing:
            return None
        kept = tuple(p for p in value if p < count)
        return (f"partition(s) {', '.join(map(str, missing))} do not exist: topic {scope.name} has {count} "
                f"partitions (0-{count - 1}); applied {','.join(map(str, kept)) or 'none excluded'}", kept)

    def _partition_count(self, client: _Client, topic: str) -> int:
        cached = self._meta.get((client.cluster, topic))
        now = time.monotonic()
        if cached is not None and cached[1] > now:
            return cached[0]
        count = 0
        try:
            meta = client.rd.list_topics(topic, timeout=5)
            tmeta = meta.topics.get(topic)
            if tmeta is not None and tmeta.error is None:
                count = len(tmeta.partitions)
        except KafkaException as exc:
            log.warning("ykafka.producer.metadata_failed", topic=topic, cluster=client.cluster, error=str(exc))
        if count:
            self._meta[(client.cluster, topic)] = (count, now + self._meta_ttl_s)
        return count

    # --- draining swaps ----------------------------------------------------------------------------

    def _service(self) -> None:
        """Advance swaps: release held topics whose old client drained; close drained retired clients."""
        if not self._retiring and not self._held:
            return
        drained: list[_Client] = []
        with self._lock:
            now = time.monotonic()
            for client in list(self._retiring):
                if len(client.rd) == 0:
                    if client.drained_at is None:
                        client.drained_at = now
                        self._release(client)
                    elif now - client.drained_at >= _RETIRED_GRACE_S:
                        self._retiring.remove(client)
                        for topic in [t for t, c in self._home.items() if c is client]:
                            del self._home[topic]  # drained: nothing to wait for
                        drained.append(client)
                elif client.drained_at is not None:
                    client.drained_at = None  # a late send arrived during the grace period
                elif now > client.deadline and not client.abandoned:
                    client.abandoned = True
                    log.warning("ykafka.producer.swap_timeout", cluster=client.cluster, in_queue=len(client.rd),
                                timeout_s=self._swap_timeout_s,
                                consequence="held topics released before the old client drained; per-key "
                                            "order across the swap is not guaranteed")
                    self._runtime.record_error({"type": "swap_timeout", "cluster": client.cluster,
                                                "in_queue": len(client.rd)})
                    self._release(client)
            if any(waiting is None for waiting in self._held.values()):
                self._release(None)
            self._rebind_poll()
        for client in drained:  # outside the lock: closing joins librdkafka's threads (milliseconds)
            self._close_client(client)
            log.info("ykafka.producer.client_closed", cluster=client.cluster)

    def _release(self, old: _Client | None) -> None:
        """Send, in order, the pending messages of topics that waited for ``old`` (None: retry leftovers).

        Each topic's messages go to ONE client for the whole release (resolved once), so a config change
        arriving mid-release cannot split them over two clients; the next ``_prepare`` sees that move and
        holds the topic again.
        """
        topics = {t for t, waiting in self._held.items() if waiting is old or waiting is None}
        if not topics:
            return
        for topic in topics:
            if old is not None and self._held[topic] is old:
                self._home.pop(topic, None)  # all it sent on ``old`` is delivered (or given up on)
            self._held[topic] = None
            self._states.pop(topic, None)
        keep: deque[tuple[str, Any, Any, int, DeliveryCallback | None, int, Any]] = deque()
        blocked: set[str] = set()
        targets: dict[str, _Client] = {}
        while self._pending:
            item = self._pending.popleft()
            topic = item[0]
            if topic not in topics or topic in blocked:
                keep.append(item)
                continue
            client = targets.get(topic)
            if client is None:
                try:
                    state = self._prepare(topic)
                except Exception as exc:
                    log.warning("ykafka.producer.release_failed", topic=topic, error=repr(exc))
                    blocked.add(topic)
                    keep.append(item)
                    continue
                if self._held.get(topic) is not None:  # held again: it moved while partly released
                    blocked.add(topic)
                    keep.append(item)
                    continue
                client = targets[topic] = state.client
            try:
                self._send(client, *item)
            except BufferError:
                blocked.add(topic)
                keep.append(item)
            except Exception as exc:
                log.warning("ykafka.producer.release_failed", topic=topic, error=repr(exc))
                blocked.add(topic)
                keep.append(item)
        self._pending = keep
        released = sorted(topics - blocked)
        for topic in released:
            if self._held.get(topic, False) is None:
                del self._held[topic]
            self._states.pop(topic, None)
        self._retire_idle()
        if released:
            log.info("ykafka.producer.topics_released", topics=released, pending=len(self._pending))
            self._runtime.report_now()

    def _retire_idle(self) -> None:
        """Retire active clients no topic sends to any more (e.g. left behind by a second change mid-swap)."""
        used = {id(c) for c in self._home.values()} | {id(st.client) for st in self._states.values()}
        for client in list(self._clients.values()):
            if id(client) not in used:
                self._retire(client, reason="no topic uses it")

    def _close_client(self, client: _Client) -> None:
        """Release a drained client's librdkafka handle now (threads, connections, descriptors)."""
        client.rd.flush(0)
        if self._dr is not None:
            self._dr.forget_client(client.rd)  # the engine keeps no reference to it
        if client.hastener is not None:
            client.hastener.join()
        close_producer(client.rd)

    def _dr_changed(self) -> None:
        self._states.clear()
        self._unbind_poll()  # the engine may hand back work for poll() (retired clients to drain)

    def _unbind_poll(self) -> None:
        self.__dict__.pop("poll", None)

    def _all_clients(self) -> list[_Client]:
        return list(self._clients.values()) + list(self._retiring)

    def _rebind_poll(self) -> None:
        """With one client and nothing to service, ``poll`` IS that client's poll (no Python per call)."""
        if (len(self._clients) == 1 and not self._retiring and not self._held and not self._closed
                and self._delivery_hook is None and (self._dr is None or not self._dr.needs_poll)):
            self.__dict__["poll"] = next(iter(self._clients.values())).rd.poll
            if self._dr is not None and self._dr.needs_poll:  # work arrived meanwhile: poll() serves it
                self.__dict__.pop("poll", None)
        else:
            self.__dict__.pop("poll", None)

    # --- confluent-kafka API -----------------------------------------------------------------------

    def poll(self, timeout: float | None = -1) -> int:
        """Serve delivery callbacks (of every underlying client and the disaster-recovery engine's) and
        advance client swaps."""
        self._service()
        clients = self._all_clients()
        dr = self._dr
        if dr is not None and "poll" not in self.__dict__ and not self._retiring and not self._held:
            self._rebind_poll()  # back to the one-call poll once the engine has nothing for us
        if not clients:
            if timeout and timeout > 0:
                time.sleep(timeout)
            return 0 if dr is None else dr.poll(0)
        events = sum(c.rd.poll(0) for c in clients)
        if dr is not None:
            events += dr.poll(0)
        if events or timeout == 0:
            return events
        if len(clients) == 1 and not self._retiring:
            return int(clients[0].rd.poll(-1 if timeout is None else timeout))
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        while True:
            slice_s = 0.01 if deadline is None else max(0.0, min(0.01, deadline - time.monotonic()))
            if clients:
                events = clients[0].rd.poll(slice_s) + sum(c.rd.poll(0) for c in clients[1:])
            else:  # every client retired and closed; the next send builds one
                time.sleep(slice_s)
                events = 0
            if dr is not None:
                events += dr.poll(0)
            self._service()
            if events or (deadline is not None and time.monotonic() >= deadline):
                return events
            clients = self._all_clients()

    def flush(self, timeout: float | None = -1) -> int:
        """Wait for every message (incl. those held by a swap) to be delivered; returns how many remain."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout

        def remaining() -> float:
            return -1 if deadline is None else max(0.0, deadline - time.monotonic())

        while self._retiring or self._held:
            self._service()
            if not self._retiring and not self._held:
                break
            if deadline is not None and time.monotonic() >= deadline:
                return len(self)
            for client in list(self._retiring):
                client.rd.poll(0.01)
            for client in list(self._clients.values()):
                client.rd.poll(0)
            if not any(c.drained_at is None for c in self._retiring) and not self._held:
                break
        for client in list(self._clients.values()):
            left = remaining()
            client.rd.flush(left if left >= 0 else -1)
        if self._dr is not None:  # standby / re-routed messages delivered, spilled ones on disk
            left = remaining()
            self._dr.flush(left if left >= 0 else 3600.0)
        return len(self)

    def __len__(self) -> int:
        dr = self._dr.pending() if self._dr is not None else 0
        return sum(len(c.rd) for c in self._all_clients()) + len(self._pending) + dr

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """Purge messages as confluent-kafka does; held messages are released first so they report too."""
        with self._lock:
            for topic in list(self._held):
                self._held[topic] = None
            self._release(None)
            for client in self._all_clients():
                client.rd.purge(in_queue=in_queue, in_flight=in_flight, blocking=blocking)

    # --- transactions: confluent-kafka's API, on the default cluster's client (the one its sends use
    # while no hot change gives a topic settings of its own); errors are KafkaExceptions whose args[0]
    # answers retriable() / txn_requires_abort() as confluent-kafka's

    def init_transactions(self, *args: Any, **kwargs: Any) -> None:
        self._transaction("init_transactions", *args, **kwargs)

    def begin_transaction(self) -> None:
        self._transaction("begin_transaction")

    def send_offsets_to_transaction(self, *args: Any, **kwargs: Any) -> None:
        self._transaction("send_offsets_to_transaction", *args, **kwargs)

    def commit_transaction(self, *args: Any, **kwargs: Any) -> None:
        self._transaction("commit_transaction", *args, **kwargs)

    def abort_transaction(self, *args: Any, **kwargs: Any) -> None:
        self._transaction("abort_transaction", *args, **kwargs)

    def _transaction(self, name: str, *args: Any, **kwargs: Any) -> None:
        if self._closed:
            raise ClosedError("Producer has been closed")
        try:
            getattr(self._default_client().rd, name)(*args, **kwargs)
        except KafkaException as exc:
            raise from_kafka_error(exc) from None

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """Cluster metadata from the cluster ``topic`` is routed to (the default cluster without one)."""
        client = self._prepare(topic).client if topic else self._default_client()
        try:
            return client.rd.list_topics(topic, timeout=timeout)
        except KafkaException as exc:
            raise from_kafka_error(exc) from None

    def _default_client(self) -> _Client:
        with self._lock:
            cluster = self._runtime.default_cluster
            props = self._client_props(cluster, self._runtime.effective(cluster=cluster))
            key = (cluster, _freeze(props))
            return self._clients.get(key) or self._new_client(key, cluster, props)

    def close(self, timeout: float = 30.0) -> int:
        """Flush (bounded), stop background work, release the clients; returns messages left undelivered."""
        if self._closed:
            return 0
        with self._exit:  # the engine, the clients, observability, the runtime: each step runs
            left = self.flush(timeout)
        if left:
            log.warning("ykafka.producer.closed_with_undelivered", messages=left)
        return left

    def _close_clients(self) -> None:
        with self._lock:
            self._closed = True
            # the last report still names the topics it wrote to (the console's inventory of a short-lived job)
            self._closed_routes = self._routes()
            self._states.clear()
            self.__dict__.pop("poll", None)
            clients = self._all_clients()
            self._clients.clear()
            self._retiring.clear()
            self._home.clear()
            self._held.clear()
        with contextlib.ExitStack() as stack:
            for client in clients:  # threads and broker connections go now, not at some later GC
                stack.callback(self._close_client, client)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- introspection (ops, samples, tests) -------------------------------------------------------

    @property
    def runtime(self) -> Runtime:
        return self._runtime

    @property
    def disaster_recovery(self) -> DisasterRecovery | None:
        """The spill / failover engine (routes, spill depth, replay and sync progress in ``status()``)."""
        return self._dr

    @property
    def default_delivery(self) -> DeliveryCallback | None:
        """The ``on_delivery`` of the config, used for a send that gives none."""
        return self._default_dr

    def tracer(self) -> Tracer:
        """The message tracer of this producer."""
        return self._obs.tracer()

    def add_error_listener(self, listener: Callable[[Any], None]) -> None:
        """Be told of every ``error_cb`` error of this producer's clients (before the user's ``error_cb``)."""
        self._error_listeners.append(listener)

    def retire_clients(self, cluster: str, reason: str) -> None:
        """Retire every client of ``cluster`` (a restarted cluster may not know their idempotent producer
        id); its topics move to fresh clients through the usual held swap."""
        with self._lock:
            for client in list(self._clients.values()):
                if client.cluster == cluster:
                    self._retire(client, reason)

    def route(self, topic: str) -> str:
        """The cluster ``topic`` is written to now."""
        return self._prepare_cached(topic).cluster

    def applied_config(self, topic: str) -> dict[str, Any]:
        """The effective values in force for ``topic`` (what its next send uses)."""
        return dict(self._prepare_cached(topic).effective)

    def in_force(self, topic: str) -> dict[str, Any] | None:
        """What the last send to ``topic`` used, without resolving anything (None if nothing cached)."""
        st = self._states.get(topic)
        return None if st is None else st.effective

    def _prepare_cached(self, topic: str) -> _TopicState:
        return self._states.get(topic) or self._prepare(topic)

    def on_config_change(self, listener: Callable[[ConfigChange], None]) -> None:
        """Be told of every hot-config change (and rejection), from the config poll thread."""
        self._runtime.add_listener(listener)

    def clients(self) -> list[dict[str, Any]]:
        """The underlying librdkafka producers (cluster, key settings, queue depth)."""
        with self._lock:
            return [c.describe() for c in self._all_clients()]

    @property
    def swaps(self) -> int:
        """How many times a client was retired for a rebuild or a route switch."""
        return self._swaps

    def _error_cb(self, err: Any) -> None:
        mapped = from_kafka_error(err, app_id=self._runtime.app_id)  # a broker's refusal names the app
        log.warning("ykafka.producer.kafka_error", code=mapped.name, error=str(mapped), fatal=mapped.fatal)
        self._runtime.record_error({"type": "kafka", "code": mapped.name, "reason": str(mapped),
                                    "fatal": mapped.fatal})
        for listener in self._error_listeners:
            listener(err)
        if self._user_error_cb is not None:
            self._user_error_cb(err)

    def _health(self) -> dict[str, Any]:
        """Cumulative sends, errors, throttled sends and the latest send p99 (a rollout's canary judgement)."""
        obs = self.__dict__.get("_obs")  # the first report may come before observability is set up
        metrics = obs.metrics if obs is not None else None
        return {**(metrics.health() if metrics is not None else {}), "throttled": self._throttles.refused()}

    def _routes(self) -> dict[str, str]:
        """Topic -> the cluster it is written to (under the lock)."""
        routes = {topic: st.cluster for topic, st in self._states.items()}
        for topic, client in self._home.items():
            routes.setdefault(topic, client.cluster)
        return routes

    def _drift(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Per topic, the librdkafka settings the hot config asks for that differ from those of the client the
        topic sends through now: a value the client adjusted (idempotence off under acks != all), a rebuild that
        librdkafka refused (the old client stays in force) or that has not happened yet."""
        with self._lock:
            homes = list(self._home.items())[:20]
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for topic, client in homes:
            try:
                intended = catalog.rdkafka_properties(self._runtime.effective(topic=topic, cluster=client.cluster),
                                                      "producer.", adjust=False)
            except Exception:  # a value the runtime cannot resolve right now: nothing to compare
                continue
            diff = {prop: {"intended": _shown(value), "in_force": _shown(client.props.get(prop))}
                    for prop, value in intended.items() if _shown(value) != _shown(client.props.get(prop))}
            if diff:
                out[topic] = diff
        return out

    def _report(self) -> dict[str, Any]:
        dr = self._dr.status() if self._dr is not None else None  # before our lock: the engine's come second
        drift = self._drift()
        with self._lock:
            routes = self._closed_routes if self._closed else self._routes()
            return {
                "topics": sorted(routes),
                "cluster": self._runtime.default_cluster,
                "state": "closed" if self._closed else ("swapping" if self._held or self._retiring else "running"),
                "extra": {"routes": routes, "clients": [c.describe() for c in self._all_clients()],
                          "held_topics": sorted(self._held), "pending": len(self._pending), "swaps": self._swaps,
                          "dr": dr, "partitions": {topic: count for (_, topic), (count, _) in self._meta.items()},
                          "health": self._health(), "drift": drift,
                          "drift_count": sum(len(d) for d in drift.values())},
            }


def _shown(value: Any) -> str | None:
    """A librdkafka setting as text, so ``True`` and ``"true"``, ``5`` and ``"5"`` compare equal."""
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)
