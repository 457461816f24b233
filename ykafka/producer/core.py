"""The drop-in, hot-configurable Producer: ``from ykafka import Producer``.

Same call shapes as confluent-kafka's ``Producer`` (``produce``, ``poll``, ``flush``, ``len()``, ``purge``,
``list_topics``), plus identity in the config. Everything operators change live arrives through the
:class:`~ykafka.runtime.Runtime` (MetaServer grant + Apollo namespaces) and is applied here:

* per topic, a cached :class:`_TopicState` (ACL decision, route, librdkafka client, partition picker,
  throttle, and its *send chain*: the steps its messages go through, composed once in
  :mod:`~ykafka.producer.chain`) is dropped whenever the runtime's version moves and rebuilt on that topic's
  next ``produce``; a send is one dict lookup and one call of the chain, which for a topic without per-message
  steps IS the librdkafka call;
* ONE librdkafka producer per (cluster, effective librdkafka settings), shared by every topic on it;
* a topic whose client changes (a rebuild key such as ``producer.acks``, or ``route.cluster``) is *held*:
  its new messages wait in order in a local queue until every message it sent on the old client is
  delivered, then go to the new client. The old client is retired as a whole (its other topics move to a
  fresh client with the same settings) because librdkafka cannot tell per-topic queue depth; the
  drain is driven by the user's own ``poll()`` / ``flush()`` so delivery callbacks fire there, exactly as
  with confluent-kafka, whatever client delivered.

Seam for spill / failover: :meth:`Producer._send` is the one place a message is handed to a cluster's
librdkafka client and :meth:`Producer._delivered` the one place delivery reports come back when a hook is
installed (:meth:`Producer.set_hooks`). Without hooks a topic's chain does not go through ``_send``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import structlog

from ykafka import catalog, lifecycle
from ykafka.config import LocalConfig
from ykafka.config import load as load_config
from ykafka.dr import attach as dr_attach  # registers the ykafka.spill.* / ykafka.dr.* options
from ykafka.dr.port import DrEngine
from ykafka.errors import BufferFullError, ClosedError, ConfigError
from ykafka.headers import TRACE_ID
from ykafka.hotconfig import ConfigChange
from ykafka.lifecycle import fork_generation, on_collect, weak_method
from ykafka.observability import Observability
from ykafka.producer.resolve import TopicResolver
from ykafka.producer.state import (
    DeliveryCallback,
    DeliveryHook,
    SendHook,
    _Client,
    _freeze,
    _random,
    _TopicState,
    _with_header,
    send_error,
)
from ykafka.producer.swap import ClientSwaps
from ykafka.runtime import Runtime
from ykafka.throttle import Throttles
from ykafka.tracing import Tracer, new_message_id
from ykafka.transport import (
    KafkaException,
    ProducerIdHastener,
    check_settings,
    from_kafka_error,
    is_auth_error,
)

if TYPE_CHECKING:
    from ykafka.dr.engine import DisasterRecovery

log = structlog.get_logger(__name__)



class Producer(ClientSwaps, TopicResolver):
    """A confluent-kafka-compatible producer whose behaviour operators change live.

    ``Producer({"ykafka.app.id": ..., "ykafka.app.secret": ..., "ykafka.metaserver": ...})`` or, in local
    mode, ``Producer({"bootstrap.servers": ...})``. Raises :class:`ConfigError` for a bad local config,
    :class:`AuthError` / :class:`MetaServerUnavailable` when no grant can be had.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(config or {})
        merged.update(kwargs)
        self._given = dict(merged)  # a forked child builds its own producer from it (_after_fork)
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
        self._dr: DrEngine | None = None
        self._error_listeners: list[Callable[[Any, str | None], None]] = []
        # per cluster and credentials: one object (clients are keyed by it)
        self._error_cbs: dict[tuple[str, Any], Callable[[Any], None]] = {}
        ProducerIdHastener.start_worker()  # here, not on the first send (see the class)
        # what is started here is stopped by close() in reverse order, every step even when one fails; a
        # failure while starting unwinds what was started before it
        with contextlib.ExitStack() as exit_stack:
            self._runtime = Runtime(self._conf)
            exit_stack.callback(self._runtime.close)
            self._born = fork_generation()
            self._runtime.start()
            local_route = self._conf.catalog_defaults.get("route.cluster")
            if local_route is not None and local_route not in self._runtime.clusters():
                raise ConfigError(f"route.cluster {local_route!r} is not a known cluster "
                                  f"({', '.join(sorted(self._runtime.clusters()))})")
            # a bad local setting raises here (KafkaException), as confluent-kafka's does, not at a first send
            cluster = self._runtime.default_cluster
            check_settings(self._settings(cluster, self._runtime.effective(cluster=cluster)))
            # the runtime's threads reach this producer only weakly: a producer nobody references is collected
            # (ykafka/lifecycle.py); its shutdown (self._exit, on_collect below) never needs it
            self._runtime.add_version_listener(weak_method(self._on_version))
            self._runtime.set_report_provider(weak_method(self._report, {}))
            self._runtime.hot.add_scoped_validator(weak_method(self._check_partitions))
            self._obs = Observability(self._runtime, "producer")  # trace events, statistics, client events
            exit_stack.callback(self._obs.close)
            dr_box: list[DrEngine] = []  # the engine, once attached (the client step closes after it)
            exit_stack.callback(_close_clients, self._lock, self._clients, self._retiring, dr_box)
            if self._conf.get("ykafka.dr.enabled"):  # spill, replay, dual-DC failover (docs/architecture.md)
                # the engine sees this producer through the ProducerPort, this producer the engine through its
                # DrEngine surface (both in dr/port.py): a link went down / up or a route moved -> _dr_changed;
                # callbacks from its threads wait for poll() -> _unbind_poll
                self._dr = dr_attach.attach(weakref.proxy(self), on_change=weak_method(self._dr_changed),
                                            on_mail=weak_method(self._unbind_poll))
                dr_box.append(self._dr)
                exit_stack.callback(self._dr.close, 1.0)  # what is still spilled stays on disk for the next start
            if any(callable(rd.get(name)) for name in ("error_cb", "stats_cb", "throttle_cb")):
                # confluent-kafka's producer is up (connecting, reporting errors and statistics) once created;
                # an application that listens for those gets the default cluster's client now, not at a first send
                self._default_client()
            self._exit = exit_stack.pop_all()
        # dropped without close(): like confluent-kafka's, nothing is flushed; queued messages are dropped (a
        # ResourceWarning counts them), journaled ones stay in the spill for the app's next producer
        lifecycle.opened(self)
        self._finalizer = on_collect(self, "Producer", self._runtime.client_id,
                                     functools.partial(_reap, self._exit, self._clients, self._retiring, dr_box),
                                     functools.partial(_unsent, self._clients, self._retiring, self._pending))

    # --- the hot path ------------------------------------------------------------------------------

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: DeliveryCallback | None = None, callback: DeliveryCallback | None = None,
                timestamp: int = 0, headers: Any = None) -> None:
        """Send a message asynchronously; same arguments and errors as confluent-kafka's ``produce``.

        Raises :class:`AclDenied` (topic outside the grant; nothing sent), :class:`ThrottledError`,
        :class:`BufferFullError` (also a ``BufferError``), :class:`ClosedError`, or a mapped
        :class:`KafkaError`.
        """
        try:
            st = self._states[topic]  # a subscript, not .get(): no method call (an uncached topic is transient)
        except KeyError:
            st = self._resolve_for_send(topic)
        if on_delivery is None:
            on_delivery = callback
        fast = st.fast
        try:
            if fast is None or partition >= 0:
                st.send(topic, value, key, partition, on_delivery, None, timestamp, headers)  # its chain (chain.py)
            else:  # the chain is the disaster-recovery direct step (after a sampled trace): chain's sends, inline
                direct, produce, rate = fast
                if rate and _random() < rate:  # chain._traced_sampled: sampled, decided once, here
                    on_delivery, headers = self._traced(st, key, on_delivery, headers)
                if on_delivery is None:
                    on_delivery = self._default_dr
                if key is not None or timestamp:  # its produce order rides along (see chain._direct)
                    user, bind = direct.last_keyed
                    if on_delivery is not user:
                        bind = direct.binder(on_delivery)
                    on_delivery = bind(next(direct.order))
                else:
                    user, shared = direct.last
                    on_delivery = shared if on_delivery is user else direct.shared(on_delivery)
                produce(topic, value, key, partition, on_delivery, None, timestamp, headers)
        except BufferFullError:  # a hold's full queue: already the drop-in error
            raise
        except (BufferError, KafkaException) as exc:  # a broker's refusal names the app, cluster and topic
            raise send_error(exc, self._runtime.app_id, st.cluster, topic) from None

    def _resolve_for_send(self, topic: str) -> _TopicState:
        """A send to a topic without a cached state: checked, then resolved (and cached when it can be)."""
        if self._closed:
            raise ClosedError("Producer has been closed")  # confluent-kafka's words
        if not isinstance(topic, str) or not topic:
            raise TypeError("topic must be a non-empty str")
        return self._prepare(topic)

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
            st.traced_pair = (on_delivery, wrapped)  # the next send with this callback skips all this
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
        except (BufferError, KafkaException) as exc:
            raise send_error(exc, self._runtime.app_id, client.cluster, topic) from None

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
        # a statistics event (the DR stall watch's come every second) counts in a client's len() until served: one
        # that arrived while the engine flushed is served now, so a flush that delivered everything returns 0
        for client in self._all_clients():
            client.rd.poll(0)
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
        self._finalizer.detach()
        lifecycle.closed(self)
        left = 0
        with self._exit:  # the engine, the clients, observability, the runtime: each step runs
            try:
                left = self.flush(timeout)
            finally:
                self._mark_closed()
        if left:
            log.warning("ykafka.producer.closed_with_undelivered", messages=left)
        return left

    def _mark_closed(self) -> None:
        """No more sends; the clients themselves are closed by the close steps (after the engine)."""
        with self._lock:
            self._closed = True
            # the last report still names the topics it wrote to (the console's inventory of a short-lived job)
            self._closed_routes = self._routes()
            self._states.clear()
            self.__dict__.pop("poll", None)
            self._home.clear()
            self._held.clear()

    def __reduce__(self) -> Any:
        raise TypeError(f"a {type(self).__name__} cannot be pickled or sent to another process (its librdkafka "
                        "handles and threads belong to this one): create one in that process")

    def __enter__(self) -> Producer:
        return self

    # --- fork (ykafka/lifecycle.py) ------------------------------------------------------------------

    #: the calls that, in a forked child, first give the producer a life of its own there
    _CHILD_CALLS = ("produce", "poll", "flush", "purge", "list_topics", "init_transactions", "begin_transaction",
                    "send_offsets_to_transaction", "commit_transaction", "abort_transaction", "close")

    def _after_fork(self) -> None:
        """In a child forked after this producer was made (called by lifecycle's ``os.register_at_fork`` hook).

        Its librdkafka handles and threads are the parent's and are gone here. A plain Producer holds nothing
        a child needs from the parent (as confluent-kafka advises, clients are made after the fork), so the
        first call in the child builds it afresh from the same config: new handles, threads and its own spill
        slot (the parent's stays locked by the parent: the journal is never shared). Until then, and forever for
        the parent's objects, nothing inherited is closed or destroyed. A subclass (its constructor takes its
        own arguments) refuses instead, with :class:`ForkedClientError` naming the fix."""
        self._finalizer.detach()
        if type(self) is not Producer:
            lifecycle.disable_in_child(self, type(self).__name__, self._CHILD_CALLS[:-1])
            return
        for name in self._CHILD_CALLS:
            self.__dict__[name] = functools.partial(_reborn, weakref.ref(self), name)

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- introspection (ops, samples, tests) -------------------------------------------------------

    @property
    def runtime(self) -> Runtime:
        return self._runtime

    @property
    def disaster_recovery(self) -> DisasterRecovery | None:
        """The spill / failover engine (routes, spill depth, replay and sync progress in ``status()``); for
        operators and tests: the producer itself uses only its :class:`~ykafka.dr.port.DrEngine` surface."""
        return cast("DisasterRecovery | None", self._dr)

    @property
    def default_delivery(self) -> DeliveryCallback | None:
        """The ``on_delivery`` of the config, used for a send that gives none."""
        return self._default_dr

    def tracer(self) -> Tracer:
        """The message tracer of this producer."""
        return self._obs.tracer()

    def add_error_listener(self, listener: Callable[[Any, str | None], None]) -> None:
        """Be told of every ``error_cb`` error of this producer's clients, with the client's cluster (before the
        user's ``error_cb``)."""
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

    def _error_cb(self, err: Any, cluster: str | None = None, username: Any = None) -> None:
        if cluster is not None and username is not None and is_auth_error(err) \
                and self._username_in_force(cluster) not in (None, username):
            # a retired handle (swapped out when the grant brought new credentials) reconnecting with the password
            # the MetaServer retired until it is closed: not the credentials in force, so not the cluster refusing
            # us; told on, it re-marked the cluster refused and failed every send for ~0.15 s each time (issue 37)
            log.info("ykafka.producer.retired_credentials_refused", cluster=cluster, code=err.code())
            return
        mapped = from_kafka_error(err, app_id=self._runtime.app_id, cluster=cluster)  # a refusal names the app
        log.warning("ykafka.producer.kafka_error", code=mapped.name, error=str(mapped), fatal=mapped.fatal)
        self._runtime.record_error({"type": "kafka", "code": mapped.name, "reason": str(mapped),
                                    "fatal": mapped.fatal})
        for listener in self._error_listeners:
            listener(err, cluster)
        if self._user_error_cb is not None:
            self._user_error_cb(err)

    def _username_in_force(self, cluster: str) -> Any:
        """The SASL user a new client of ``cluster`` gets now (the grant's current credentials)."""
        try:
            return self._runtime.rdkafka_config(cluster).get("sasl.username")
        except Exception:  # the grant cannot say right now: count the refusal, as before
            return None

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
                "cluster": _main_cluster(routes, self._runtime.default_cluster),
                "state": "closed" if self._closed else ("swapping" if self._held or self._retiring else "running"),
                "extra": {"routes": routes, "clients": [c.describe() for c in self._all_clients()],
                          "held_topics": sorted(self._held), "pending": len(self._pending), "swaps": self._swaps,
                          "dr": dr, "partitions": {topic: count for (_, topic), (count, _) in self._meta.items()},
                          "health": self._health(), "drift": drift,
                          "drift_count": sum(len(d) for d in drift.values())},
            }


def _main_cluster(routes: dict[str, str], default: str) -> str:
    """The cluster most of the producer's topics are written to (ties: by name), else the app's default: the
    console's Cluster column and the inventory's ``cluster`` filter show where its messages go, so a producer of a
    topic routed to another cluster is not listed at its app's default."""
    if not routes:
        return default
    counts = Counter(routes.values())
    return min(counts, key=lambda name: (-counts[name], name))


def _reborn(ref: weakref.ReferenceType[Producer], name: str, *args: Any, **kwargs: Any) -> Any:
    """A forked child's first call on a producer made in its parent: the producer is built again here, then the
    call runs (Producer._after_fork)."""
    producer = ref()
    if producer is None:
        raise ClosedError("Producer has been closed")
    if name == "close":  # never used in this child: nothing of its own to close
        for call in Producer._CHILD_CALLS:
            producer.__dict__.pop(call, None)
        producer.__dict__["_closed"] = True
        return 0
    lifecycle.keep_inherited(dict(producer.__dict__))  # the parent's handles: never destroyed here
    given = producer._given
    producer.__dict__.clear()
    Producer.__init__(producer, given)
    log.info("ykafka.producer.rebuilt_after_fork", pid=os.getpid(), client_id=producer.runtime.client_id)
    return getattr(producer, name)(*args, **kwargs)


def _close_clients(lock: threading.RLock, clients: dict[tuple[Any, ...], _Client], retiring: list[_Client],
                   dr_box: list[DrEngine]) -> None:
    """close()'s step releasing the producer's librdkafka clients (each one's threads and broker connections
    go now, not at some later GC). A function of the producer's containers, not of the producer, so that the
    shutdown of a collected producer (:func:`_reap`) can run the same close steps."""
    with lock:
        dropped = list(clients.values()) + list(retiring)
        clients.clear()
        retiring.clear()
    dr = dr_box[0] if dr_box else None
    with contextlib.ExitStack() as stack:
        for client in dropped:
            stack.callback(Producer._close_client, client, dr)


def _reap(exit_stack: contextlib.ExitStack, clients: dict[tuple[Any, ...], _Client], retiring: list[_Client],
          dr_box: list[DrEngine]) -> None:
    """The shutdown of a producer collected without close() (ykafka/lifecycle.py, on the reaper thread): the
    engine closes (journaled messages stay on disk), then the clients are dropped WITHOUT a flush or a delivery
    callback, as confluent-kafka's are when collected (librdkafka destroys the handle, queued messages go), then
    observability and the runtime stop."""
    dr = dr_box[0] if dr_box else None
    try:
        if dr is not None:
            dr.close(1.0)
    finally:
        dropped = list(clients.values()) + list(retiring)
        clients.clear()
        retiring.clear()
        try:
            _forget(dropped, dr)
            dropped.clear()  # the handles' last references: librdkafka destroys them here
        finally:
            exit_stack.close()


def _forget(clients: list[_Client], dr: DrEngine | None) -> None:
    for client in clients:
        if client.hastener is not None:
            client.hastener.join()
        if dr is not None:
            dr.forget_client(client.rd)


def _unsent(clients: dict[tuple[Any, ...], _Client], retiring: list[_Client], pending: deque[Any]) -> int:
    """Messages a producer still held in its clients' queues and swap holds (counted inside the garbage collector:
    no lock taken, so not the engine's own, whose count needs its locks)."""
    return sum(len(c.rd) for c in [*clients.values(), *retiring]) + len(pending)


def _shown(value: Any) -> str | None:
    """A librdkafka setting as text, so ``True`` and ``"true"``, ``5`` and ``"5"`` compare equal."""
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)
