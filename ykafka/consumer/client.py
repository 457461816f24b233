"""``ykafka.Consumer``: a drop-in for confluent-kafka's ``Consumer`` that operators steer live, plus ``run(handler)``.

Users who keep their own loop call ``subscribe`` / ``poll`` / ``commit`` as with confluent-kafka. Users who
only want to write a handler call ``run(handler)``: one librdkafka consumer feeds a worker pool with
ordering, at-least-once commits, back-pressure and retry / DLQ (:mod:`ykafka.consumer.engine`).

Either way the client authenticates through the shared :class:`~ykafka.runtime.Runtime`, refuses topics and
groups outside its ACL before anything is sent, reads from the cluster ``route.cluster`` names, and
applies hot-config changes (resolved for the group, and for the topic when it subscribes to one) live.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

import structlog

from ykafka import catalog, lifecycle
from ykafka import config as config_mod
from ykafka.consumer import session as S
from ykafka.consumer.engine import Engine
from ykafka.consumer.live import retry_policy
from ykafka.consumer.observe import ConsumerObserver
from ykafka.consumer.protocol import GroupProtocol
from ykafka.consumer.retry import RetryRouter, shared_properties
from ykafka.consumer.settings import ConsumerSettings
from ykafka.consumer.shutdown import stop_on_signals
from ykafka.errors import ClosedError, ConfigError, InvalidConfigValue, KafkaError
from ykafka.lifecycle import fork_generation, on_collect, weak_method
from ykafka.runtime import Runtime
from ykafka.transport import Message, TopicPartition, from_kafka_error

log = structlog.get_logger(__name__)

USER = "user"  # pause reason of Consumer.pause()


def is_async_handler(handler: Any) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)


class Consumer:
    """Drop-in replacement of confluent-kafka's ``Consumer`` with live hot config and a handler framework."""

    def __init__(self, config: Mapping[str, Any], runtime: Runtime | None = None) -> None:
        conf = config_mod.load(config, "consumer")
        group = conf.rdkafka.get("group.id")
        self.group: str | None = str(group) if group else None
        self._own_runtime = runtime is None
        self.runtime = runtime or Runtime(conf, group=self.group)
        self.runtime.start()
        self._closed = False
        self._closing_thread: int | None = None  # the thread inside close(): its revoke callbacks may still call
        #: what the drop-in poll / consume read, in ONE attribute (None once closed): see poll
        self._hot: tuple[Engine, S.ConsumerSession, ConsumerObserver] | None = None
        try:
            if self.group:
                self.runtime.check_acl("group", self.group)
            self.settings = ConsumerSettings.from_options(conf.options)
            self.protocol = GroupProtocol(conf.rdkafka, self.runtime)  # KIP-848: what the broker owns
            self._topics: list[str] = []
            self.cluster = self.runtime.route(group=self.group)
            self.effective = self._resolve(self.cluster)
            # trace steps, handler timings, librdkafka statistics and client events (docs/observability.md)
            self._observer = ConsumerObserver(self.runtime, self.group, self.cluster)
            self._session = S.ConsumerSession(self._props(self.cluster, self.effective), facade=self)
            self.engine = Engine(self._session, self.group or "", self.effective, self.settings, None,
                                 self._observer)
            self._hot = (self.engine, self._session, self._observer)
            # an instance attribute: the class forwards unknown names to librdkafka (__getattr__), which makes
            # every ``self.x`` in a method a generic lookup; the closure reads what it needs from its cells
            # ... unless a subclass has its own poll (DeserializingConsumer: the instance attribute shadowed it and
            # its messages came back undeserialized), which reaches the checked call through Consumer.poll
            if type(self).poll is Consumer.poll:
                self.__dict__["poll"] = _drop_in_poll(self.engine, self._session, self._observer)
            # the runtime's and the engine's threads reach this consumer only weakly: one nobody references is
            # collected, and its shutdown (on_collect below) runs without it (ykafka/lifecycle.py)
            self.engine.on_fatal = weak_method(self._on_fatal)
            self.engine.on_refused = weak_method(self._on_refused)
            # Values in force at start-up (local config or a namespace) apply from the first join on.
            self._session.operator_paused = bool(self.effective.get("consumer.paused"))
            self._session.left = bool(self.effective.get("consumer.leave"))
            self._lock = threading.Lock()
            self._stopped = threading.Event()
            self._stopped.set()
            self.runtime.add_version_listener(weak_method(self._on_version))
            self.runtime.set_report_provider(weak_method(self._report, {}))
        except BaseException:
            observer = self.__dict__.get("_observer")
            if observer is not None:
                observer.close()
            if self._own_runtime:
                self.runtime.close()
            raise
        self._born = fork_generation()
        lifecycle.opened(self)
        # dropped without close(): as confluent-kafka's (librdkafka's destroy), the handle is closed, which leaves
        # the group (and commits, with auto commit); on the reaper thread, not the collecting one
        self._finalizer = on_collect(self, "Consumer", self.runtime.client_id,
                                     functools.partial(_reap, self._session, self._observer,
                                                       self.runtime if self._own_runtime else None))

    # -- configuration ----------------------------------------------------------------------------------

    def _scope_topic(self) -> str | None:
        """Topic scope of resolution: the topic when the consumer reads exactly one, else group scope only."""
        plain = [t for t in self._topics if not t.startswith("^")]
        return plain[0] if len(plain) == 1 and len(self._topics) == 1 else None

    def _resolve(self, cluster: str) -> dict[str, Any]:
        topic = self._scope_topic()
        effective = self.runtime.effective(topic=topic, group=self.group, cluster=cluster)
        if self.protocol.consumer:
            effective = self.protocol.effective(effective, self.runtime.sources(topic, self.group, cluster))
        return effective

    def _props(self, cluster: str, effective: Mapping[str, Any]) -> dict[str, Any]:
        props = self.runtime.rdkafka_config(cluster, catalog.rdkafka_properties(effective, "consumer."))
        self._observer.obs.add_statistics(props)  # statistics -> lag, received messages in __ykafka_metrics
        return props

    def _route(self, topics: Sequence[str]) -> str:
        clusters = {self.runtime.route(topic=t, group=self.group) for t in topics if not t.startswith("^")}
        if not clusters:
            return self.runtime.route(group=self.group)
        if len(clusters) > 1:
            raise ConfigError(f"topics {list(topics)} are routed to different clusters {sorted(clusters)}; "
                              "use one consumer per cluster")
        return clusters.pop()

    def _on_version(self, _version: int) -> None:
        """Hot config or grant moved: re-resolve and hand what changed to the engine (cheap, any thread)."""
        self._observer.invalidate()  # trace rates are resolved again per topic
        self._session.gate.disarm()  # ... and the drop-in poll looks at each message until they are
        if self._closed:
            return
        try:
            cluster = self._route(self._topics)
            effective = self._resolve(cluster)
        except Exception as exc:  # keep the previous values in force
            log.warning("hot config not applied", error=str(exc))
            return
        changes = {k: v for k, v in effective.items()
                   if k.startswith("consumer.") and self.effective.get(k) != v}
        self.effective = effective
        if cluster != self.cluster:
            self._switch(cluster, effective)
        else:
            self._follow_credentials(cluster)
        if changes:  # already parsed by the runtime: no second validation
            self.engine.apply_valid(changes)

    def _follow_credentials(self, cluster: str) -> None:
        """The grant's principal on the cluster changed (rotation): hand it to the librdkafka consumer."""
        wanted = self.runtime.cluster(cluster).rdkafka()
        user, password = wanted.get("sasl.username"), wanted.get("sasl.password")
        session = self._session
        if user and (user, password) != (session.props.get("sasl.username"), session.props.get("sasl.password")):
            session.set_credentials(str(user), str(password))

    def _switch(self, cluster: str, effective: Mapping[str, Any]) -> None:
        log.info("consumer route changed", previous=self.cluster, cluster=cluster)
        self.cluster = cluster
        self._observer.cluster = cluster
        props = self._props(cluster, effective)
        if self.engine.running:
            props["enable.auto.commit"] = False
        self.engine.switch_cluster(props, self._router_factory(cluster))

    def apply(self, changes: Mapping[str, Any]) -> dict[str, InvalidConfigValue]:
        """Apply hot-config values now (the entry point the runtime's change events use)."""
        accepted, rejected = self.protocol.refuse(changes)
        rejected.update(self.engine.apply(accepted))
        for name, exc in rejected.items():
            self.runtime.record_error({"type": "config_rejected", "key": name, "value": str(exc.value),
                                       "reason": exc.reason})
        return rejected

    def _on_fatal(self, error: KafkaError) -> None:
        self.runtime.record_error({"type": "kafka", "code": error.name, "reason": str(error), "fatal": True})
        self.runtime.report_now()

    def _on_refused(self, err: Any, topic: str | None) -> None:
        """A broker refused this consumer (credentials revoked, ACL binding gone): the typed error, naming the
        app, the cluster and the topic (or group), logged and reported to the MetaServer."""
        refused = from_kafka_error(err, app_id=self.runtime.app_id, cluster=self.cluster, resource=topic or self.group)
        log.error("ykafka.consumer.refused_by_broker", error=str(refused))
        self.runtime.record_error({"type": "kafka", "code": refused.name, "reason": str(refused), "fatal": False})

    def _router_factory(self, cluster: str) -> Callable[[], RetryRouter] | None:
        if not self.group:
            return None
        group = self.group

        def build() -> RetryRouter:
            connection = shared_properties(self.runtime.rdkafka_config(cluster))
            return RetryRouter(group, connection, retry_policy(self.engine.effective))

        return build

    def _report(self) -> dict[str, Any]:
        engine = self.engine
        return {"topics": list(self._topics), "group": self.group, "cluster": self.cluster,
                "state": "running" if engine.running else ("closed" if self._closed else "idle"),
                # consumer state in extra (the report's free part): the console waits on paused / left (a
                # coordinated offset reset)
                "extra": {"consumer": {"workers": engine.pool.alive if engine.pool else 0,
                                       "ordering": engine.dispatcher.ordering if engine.dispatcher else None,
                                       "processed": engine.processed, "failed": engine.failed,
                                       "paused": self._session.operator_paused, "left": self._session.left},
                          **({"ephemeral": True} if self.settings.ephemeral_group else {}),
                          **({"group_protocol": "consumer"} if self.protocol.consumer else {}),
                          "health": {**(self._observer.metrics.health() if self._observer.metrics else {}),
                                     "processed": engine.processed, "handler.failed": engine.failed}}}

    # -- framework mode ---------------------------------------------------------------------------------

    def run(self, handler: Callable[[Message], Any], topics: Sequence[str] | None = None) -> None:
        """Process messages with ``handler`` on the worker pool until stopped (SIGTERM / SIGINT or :meth:`stop`).

        The handler receives one confluent-kafka ``Message``; returning means done, raising sends the message
        to the retry topics / DLQ. Offsets are committed once every earlier message is done. An ``async def``
        handler runs as with :meth:`run_async`. A fatal client error (e.g. a fenced static member) ends it by
        raising that :class:`~ykafka.errors.KafkaError` (``fatal=True``), also recorded in the client report.
        """
        if is_async_handler(handler):
            return self.run_async(handler, topics)
        self._prepare_run(topics)
        self._stopped.clear()
        try:
            with stop_on_signals(self.engine.stop):
                self.engine.run(handler)
        finally:
            self._stopped.set()

    def run_async(self, handler: Callable[[Message], Coroutine[Any, Any, Any]],
                  topics: Sequence[str] | None = None, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """:meth:`run` for an ``async def`` handler: at most ``consumer.workers`` coroutines in flight, on
        ``loop`` when given (the asyncio consumer passes the application's), else on a private loop thread."""
        self._prepare_run(topics)
        self._stopped.clear()
        try:
            with stop_on_signals(self.engine.stop):
                self.engine.run_async(handler, loop)
        finally:
            self._stopped.set()

    def throttle_wait(self) -> float:
        """Seconds until ``consumer.rate.limit`` lets the next message through (the asyncio consumer awaits it)."""
        return float(self.engine.bucket.wait_time())

    def _prepare_run(self, topics: Sequence[str] | None) -> None:
        self._check_open()
        if not self.group:
            raise ConfigError("run() needs a group.id")
        if topics is not None:
            self.subscribe(list(topics))
        if not self._topics:
            raise ConfigError("run() needs topics: call subscribe(topics) first or pass topics=")
        factory = self._router_factory(self.cluster)
        self.engine.router = factory() if factory is not None else None

    def stop(self) -> None:
        """Ask :meth:`run` to finish in-flight work, commit, leave the group and return."""
        self.engine.stop()

    # -- drop-in API ------------------------------------------------------------------------------------

    def subscribe(self, topics: Sequence[str], on_assign: S.RebalanceCallback | None = None,
                  on_revoke: S.RebalanceCallback | None = None, on_lost: S.RebalanceCallback | None = None) -> None:
        self._check_open()
        topics = list(topics)
        for topic in topics:
            # A regex cannot be checked topic by topic: it needs a consume grant on every topic.
            self.runtime.check_acl("consume", "*" if topic.startswith("^") else topic)
        cluster = self._route(topics)
        for topic in topics:
            if not topic.startswith("^"):
                self.runtime.subscribe(topic=topic, group=self.group, cluster=cluster)
        self._topics = topics
        if cluster != self.cluster:
            self.cluster = cluster
            self._observer.cluster = cluster
            self._session.props = self._props(cluster, self._resolve(cluster))
        self._on_version(self.runtime.version)  # the topic scope may change the effective values
        self._session.subscribe(topics, on_assign, on_revoke, on_lost)

    def unsubscribe(self) -> None:
        self._topics = []
        self._session.unsubscribe()

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        for tp in partitions:
            self.runtime.check_acl("consume", tp.topic)
        self._session.assign(partitions)

    def unassign(self) -> None:
        self._session.unassign()

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.runtime.check_acl("consume", tp.topic)
        self._session.may_fetch(partitions)  # Consumer.run names a partition's runs by it (session.topic_of)
        self._raw().incremental_assign(partitions)
        if self._session.rebalancing:
            self._session.user_assigned = True

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._raw().incremental_unassign(partitions)

    def assignment(self) -> list[TopicPartition]:
        if self.engine.running:  # the engine thread owns the handle; answer from the rebalance callbacks
            return [TopicPartition(t, p) for t, p in sorted(self._session.assigned)]
        return self._raw().assignment()

    def poll(self, timeout: float | None = None) -> Message | None:
        # The drop-in hot path is the instance's own ``poll`` (a closure made in __init__, which shadows this
        # method): see _drop_in_poll. This is the same call for code that reaches it through the class.
        hot = self._hot
        if hot is None:
            raise ClosedError("Consumer closed")  # confluent-kafka's words
        return _poll_checked(*hot, timeout)

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        hot = self._hot  # one attribute read, as in poll
        if hot is None:
            raise ClosedError("Consumer closed")
        engine, session, observer = hot
        gate = session.gate
        fast = gate.fast
        if fast is not None:  # armed (see PollGate): no change to apply, no rate limit, no traced topic
            raw: Any = fast.__self__  # type: ignore[attr-defined]  # the handle whose poll it is
            return raw.consume(num_messages, -1 if timeout is None else timeout)
        if engine._pending or engine._pending_switch is not None:
            engine.apply_pending()
        if session.left:
            time.sleep(min(timeout if timeout is not None and timeout >= 0 else 0.1, 0.1))
            return []
        bucket = engine.bucket
        allowed = bucket.allowance(num_messages)
        if allowed < 1:
            time.sleep(min(bucket.wait_time(), timeout if timeout is not None and timeout >= 0 else 1))
            allowed = bucket.allowance(num_messages)
            if allowed < 1:
                return []
        raw = session.consumer
        if raw is None:
            raw = session.require()
        msgs: list[Message] = raw.consume(allowed, -1 if timeout is None else timeout)
        bucket.take(len(msgs))
        if msgs:
            observer.polled(msgs)
        if gate.tried != gate.epoch:  # the next call may skip the checks and the per-message trace test
            _arm(engine, session, observer)
        return msgs

    def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition] | None:
        kwargs: dict[str, Any] = {"asynchronous": asynchronous}
        if message is not None:
            kwargs["message"] = message
        if offsets is not None:
            kwargs["offsets"] = offsets
        try:
            result: list[TopicPartition] | None = self._raw().commit(**kwargs)
        except Exception as exc:
            raise _mapped(exc) from exc
        return result

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        return self._raw().committed(partitions, **_timeout(timeout))

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return self._raw().position(partitions)

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._session.pause([(tp.topic, tp.partition) for tp in partitions], USER)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._session.resume([(tp.topic, tp.partition) for tp in partitions], USER)

    def seek(self, partition: TopicPartition) -> None:
        self._raw().seek(partition)

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        return self._raw().get_watermark_offsets(partition, cached=cached, **_timeout(timeout))

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        return self._raw().offsets_for_times(partitions, **_timeout(timeout))

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return self._raw().list_topics(topic, timeout)

    def memberid(self) -> str | None:
        if self.engine.running:
            return self._session.member_id
        return self._raw().memberid()

    def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        if message is not None:
            self._raw().store_offsets(message=message)
        else:
            self._raw().store_offsets(offsets=offsets or [])

    def consumer_group_metadata(self) -> Any:
        return self._raw().consumer_group_metadata()

    def close(self) -> None:
        """Leave the group (committing per the mode's rules) and release the runtime."""
        if self._closed:
            return
        if self.engine.running:
            self.engine.stop()
            self._stopped.wait()
        self._closed = True
        self._hot = None
        self._session.gate.closed = True
        self._session.gate.disarm()
        self._finalizer.detach()
        lifecycle.closed(self)
        # librdkafka fires the last revoke on this thread, inside the handle's close; an on_revoke that calls
        # incremental_unassign() / commit() there is served, as confluent-kafka serves it
        self._closing_thread = threading.get_ident()
        try:
            self._session.close()
        finally:
            self._closing_thread = None
            try:
                self._observer.close()  # last metrics interval, client event state=closed, queued trace
            finally:
                if self._own_runtime:
                    self.runtime.close()

    def _after_fork(self) -> None:
        """In a child forked after this consumer was made (lifecycle's ``os.register_at_fork`` hook): its handle
        and threads are the parent's, and so is its place in the group, so it cannot carry on here; every call
        raises :class:`ForkedClientError` naming the fix (make the consumer in the child), ``close()`` does
        nothing (the parent's member must not leave the group because a child exits)."""
        self._finalizer.detach()
        lifecycle.disable_in_child(self, type(self).__name__, (
            "_check_open", "poll", "consume", "commit", "subscribe", "assign", "run", "run_async", "stop",
            "unsubscribe", "unassign", "pause", "resume", "seek", "committed", "position", "store_offsets"))

    def __reduce__(self) -> Any:
        raise TypeError(f"a {type(self).__name__} cannot be pickled or sent to another process (its librdkafka "
                        "handles and threads belong to this one): create one in that process")

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        # Anything not wrapped (e.g. set_sasl_credentials) goes straight to the librdkafka consumer.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._raw(), name)

    # -- observability ----------------------------------------------------------------------------------

    @property
    def client_config(self) -> dict[str, Any]:
        """The librdkafka settings of the current handle (changes after a rebuild)."""
        return dict(self._session.client_config)

    @property
    def observer(self) -> ConsumerObserver:
        """Message trace and metrics of this consumer (its tracer, metrics and per-topic trace rates)."""
        return self._observer

    @property
    def generation(self) -> int:
        """How many librdkafka handles this consumer has built (rebuilds and rejoins add one)."""
        return self._session.generation

    # -- internals --------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed and self._closing_thread != threading.get_ident():
            raise ClosedError("Consumer closed")  # confluent-kafka's words

    def _raw(self) -> Any:
        self._check_open()
        return self._session.require()

    def _maintain(self) -> None:
        """Drop-in mode: apply pending live changes on the polling thread."""
        self._check_open()
        if self.engine.has_pending():
            self.engine.apply_pending()


def _drop_in_poll(engine: Engine, session: S.ConsumerSession,
                  observer: ConsumerObserver) -> functools.partial[Message | None]:
    """The drop-in ``poll``: a ``functools.partial`` the session's gate points at librdkafka's own ``poll`` while
    nothing needs our checks (no live change to apply, no rate limit, no traced topic:
    :class:`~ykafka.consumer.session.PollGate`), at the checked call otherwise. Armed, a call is librdkafka's
    ``poll`` reached from C: no Python frame of ours, and nothing after it."""
    gate = session.gate

    def checked(timeout: float = -1.0) -> Message | None:
        if gate.closed:
            raise ClosedError("Consumer closed")  # confluent-kafka's words
        if timeout is None:  # what the armed call (librdkafka's poll) answers: the same whichever runs
            raise TypeError("must be real number, not NoneType")
        return _poll_checked(engine, session, observer, timeout)

    entry = functools.partial(checked)
    gate.bind(entry, checked)
    return entry


def _poll_checked(engine: Engine, session: S.ConsumerSession, observer: ConsumerObserver,
                  timeout: float | None) -> Message | None:
    """``poll`` with its per-call checks (live changes applied here, the consumer left, the rate limit) and
    per-message work (the rate limit's token, the ``consumed`` trace step of a sampled message); arms the gate
    when none of it is needed any more."""
    if engine._pending or engine._pending_switch is not None:
        engine.apply_pending()
    if session.left:
        time.sleep(min(timeout if timeout is not None and timeout >= 0 else 0.1, 0.1))
        return None
    bucket = engine.bucket
    if bucket._rate:  # consumer.rate.limit.msgs
        wait = bucket.wait_time()
        if wait:
            time.sleep(min(wait, timeout) if timeout is not None and timeout >= 0 else wait)
            if bucket.wait_time():
                return None
    raw = session.consumer
    if raw is None:
        raw = session.require()
    msg = raw.poll(-1 if timeout is None else timeout)
    _polled(engine, observer, msg)
    gate = session.gate
    if gate.tried != gate.epoch:
        _arm(engine, session, observer)
    return msg


def _polled(engine: Engine, observer: ConsumerObserver, msg: Message | None) -> None:
    """The per-message work of a polled message (none for an event or an error)."""
    if msg is not None and msg.error() is None:
        if engine.bucket._rate:
            engine.bucket.take(1)
        topic: Any = msg.topic()
        watch = observer.watches.get(topic) or observer.watch(topic)
        if watch.rate:  # the topic is traced at all: this message if the producer sampled it
            observer.consumed(msg, watch.rate)


def _arm(engine: Engine, session: S.ConsumerSession, observer: ConsumerObserver) -> None:
    """Let the drop-in poll call librdkafka directly if no call or message needs our checks (on the polling
    thread): every topic the handle may return (given or subscribed: a rebalance inside an armed call may give
    any of them) resolved, none traced. A disarm while this runs wins."""
    gate = session.gate
    epoch = gate.epoch
    gate.tried = epoch  # whatever fails below holds until something moves the epoch
    raw = session.consumer
    if gate.closed or raw is None or engine._pending or engine._pending_switch is not None or session.left \
            or engine.bucket._rate:
        return
    subscribed = session.topics
    if any(topic.startswith("^") for topic in subscribed):  # a pattern: the rebalance may give any topic
        return
    watches = observer.watches
    for topic in session.fetchable_topics().union(subscribed):
        watch = watches.get(topic) or observer.watch(topic)
        if watch.rate or watches.get(topic) is not watch:  # traced, or a version move raced its resolution
            return
    gate.arm(raw.poll)
    if gate.epoch != epoch:
        gate.unarm()


def _reap(session: S.ConsumerSession, observer: ConsumerObserver, runtime: Runtime | None) -> None:
    """The shutdown of a Consumer collected without close() (on the reaper thread; never needs the Consumer)."""
    try:
        session.close()
    finally:
        try:
            observer.close()
        finally:
            if runtime is not None:
                runtime.close()


def _timeout(timeout: float | None) -> dict[str, float]:
    return {} if timeout is None else {"timeout": timeout}


def _mapped(exc: Exception) -> Exception:
    from ykafka.transport import KafkaException

    return from_kafka_error(exc) if isinstance(exc, KafkaException) else exc
