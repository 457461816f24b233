"""Sending to one cluster through its spill queue: the per-cluster link.

:class:`ClusterLink` sits where a message is handed to a cluster's librdkafka producer and where its
delivery report comes back. It sends directly while the cluster is healthy, spills while it is not, and
turns a retriable delivery failure into a re-route (to the spill, or to the standby cluster) instead of
an error. A key with spilled records keeps queueing behind them until the replayer has drained them, so
per-key order holds across an outage. When a topic's route leaves a cluster, :meth:`ClusterLink.hand_over`
gives back what its clients hold (purge) and the engine re-routes it before any newer send goes to the other
cluster, so no key is overtaken at a failover or failback either.
Replay of what was spilled is :mod:`ykafka.dr.replay`.

A broker that refuses the app (authentication or authorization failed: the app was revoked) is not an
outage: nothing it refused is spilled or re-routed. Each such message, and each message that comes back
after the refusal (timed out, purged), fails to its callback with the refusal (librdkafka's error type, as
confluent-kafka's callbacks expect, its text :class:`~ykafka.errors.BrokerAuthError`'s);
while the cluster's refusal stands (:meth:`ykafka.dr.health.ClusterHealth.refuse`) new sends fail at once the
same way.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
import time
from collections.abc import Callable
from types import FunctionType
from typing import Any, NamedTuple

import structlog

from ykafka.dr.health import ClusterHealth, ClusterState
from ykafka.dr.mailbox import Mailbox
from ykafka.dr.queue import SpillQueue, normalize_headers
from ykafka.transport import (
    KafkaException,
    Message,
    RawKafkaError,
    RawProducer,
    close_producer,
    from_kafka_error,
    is_auth_error,
)

log = structlog.get_logger(__name__)

ClientFactory = Callable[[], RawProducer]
DeliveryCallback = Callable[[Any, Any], Any]

#: delivery errors after which the message is sent again (re-routed or spilled) instead of reported.
RESEND_CODES = frozenset({
    RawKafkaError._MSG_TIMED_OUT, RawKafkaError._PURGE_QUEUE, RawKafkaError._PURGE_INFLIGHT, RawKafkaError._TRANSPORT,
    RawKafkaError._ALL_BROKERS_DOWN, RawKafkaError._TIMED_OUT, RawKafkaError._FATAL, RawKafkaError.REQUEST_TIMED_OUT,
    RawKafkaError.NOT_ENOUGH_REPLICAS, RawKafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, RawKafkaError.NETWORK_EXCEPTION,
    RawKafkaError.NOT_LEADER_FOR_PARTITION, RawKafkaError.LEADER_NOT_AVAILABLE, RawKafkaError.UNKNOWN_PRODUCER_ID,
    RawKafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, RawKafkaError._NODE_UPDATE, RawKafkaError._DESTROY,
    # the cluster came back without our producer's idempotence state: a fresh client sends it again
    RawKafkaError.PRODUCER_FENCED, RawKafkaError.INVALID_PRODUCER_EPOCH, RawKafkaError._FENCED,
})


#: a message failed for good is logged at most once per topic and error in this many seconds (with how many
#: were not logged since): a failure the application has no delivery callback for is heard of nowhere else
FAILURE_LOG_INTERVAL_S = 60.0

#: how long a hand-over away from a cluster that is up waits for its requests in flight to be answered before
#: purging them too (bench/failover.py: answered within ~100 ms normally; a stalled cluster held them 10 s)
HANDOVER_GRACE_S = 1.0


def is_resendable(err: RawKafkaError) -> bool:
    """Errors after which sending the message again (elsewhere, or later) is the right answer; never a
    broker's refusal of the app."""
    return (err.code() in RESEND_CODES or bool(err.retriable()) or bool(err.fatal())) and not is_auth_error(err)


class Outgoing(NamedTuple):
    """A message on its way to a cluster, as the user gave it (kept to send it again after a failure)."""

    topic: str
    value: Any
    key: Any
    partition: int
    timestamp: int
    headers: Any
    on_delivery: DeliveryCallback | None


def produce_outgoing(client: RawProducer, msg: Outgoing,
                     callback: Callable[[RawKafkaError | None, Message], None]) -> None:
    # positional, as confluent-kafka's C signature takes them: topic, value, key, partition, callback,
    # on_delivery, timestamp, headers (-1 / 0 / None mean "not given")
    client.produce(msg.topic, msg.value, msg.key, msg.partition if msg.partition is not None else -1, callback,
                   None, msg.timestamp or 0, msg.headers or None)


def shared_report(user_callback: DeliveryCallback | None,
                  failed: Callable[[DeliveryCallback | None, int, RawKafkaError, Message], None]
                  ) -> Callable[[RawKafkaError | None, Message], None]:
    """The delivery callback shared by every send without a key for one user callback, made once: a closure
    over the callback is one frame a report with no bound-method hop and no tuple to index (issue 39: ~130
    instructions a message less than the bound method over a ``(sender, callback, order)`` tuple it replaced;
    keyed sends keep a bound method, whose ``__self__`` is the one object a message needs, see ``binder``)."""
    if user_callback is None:
        def report_none(err: RawKafkaError | None, m: Message) -> None:
            if err is not None:
                failed(None, -1, err, m)
        return report_none

    def report(err: RawKafkaError | None, m: Message) -> None:
        if err is None:
            user_callback(None, m)
            return
        failed(user_callback, -1, err, m)
    return report


def _noop(err: Any, m: Any) -> None:
    return None


class DirectSender:
    """The healthy-cluster fast path of a :class:`ClusterLink`: the caller produces into its own client
    with :meth:`callback`'s result as the delivery callback, no :meth:`ClusterLink.send` per message.

    A failure is turned back into an :class:`Outgoing` from the delivery report itself (topic, value,
    key, timestamp, headers; partition -1, so only unpinned sends may use it) and handled exactly as the
    link's own reports are. Keyed sends carry their produce order, so a key's re-routed messages keep
    their order; sends without a key (and without their own timestamp) share one callback object per user
    callback (no allocation per message) and, having no key, no order promise across an outage.
    """

    __slots__ = ("link", "client", "order", "last", "last_keyed", "_shared", "_binders")

    def __init__(self, link: ClusterLink, client: RawProducer) -> None:
        self.link = link
        self.client = client
        self.order = link._order
        self._shared: dict[Any, Callable[..., None]] = {}
        self._binders: dict[Any, Callable[[int], Callable[..., None]]] = {}
        #: (user callback, its binder) of the last keyed send: read once per send, as ``last``
        self.last_keyed: tuple[DeliveryCallback | None, Callable[[int], Callable[..., None]]] = (None, lambda _o: _noop)
        self.binder(None)
        # (user callback, its shared callback) of the last send without a key: ONE attribute, read once per
        # send, so threads sending with different callbacks never pair one's callback with the other's report
        self.last: tuple[DeliveryCallback | None, Callable[..., None]] = (None, shared_report(None, self.failed))
        self.shared(None)

    def keyed(self, user_callback: DeliveryCallback | None) -> Callable[..., None]:
        return self.binder(user_callback)(next(self.order))

    def binder(self, user_callback: DeliveryCallback | None) -> Callable[[int], Callable[..., None]]:
        """What turns a keyed send's produce order into its delivery callback: ``binder(order)`` is a bound
        method whose ``__self__`` is the order (one allocation per message, no tuple: the sender and the user
        callback are the function's closure, made once per user callback). The pair is kept in ``last_keyed``
        for the caller's inline check, as :meth:`shared` keeps ``last``."""
        try:
            found = self._binders.get(user_callback)
        except TypeError:  # an unhashable callable: a binder of its own
            found = None
        if found is None:
            failed = self.failed

            def report(order: int, err: RawKafkaError | None, m: Message) -> None:
                if err is None:
                    if user_callback is not None:
                        user_callback(None, m)
                    return
                failed(user_callback, order, err, m)

            found = report.__get__
            with contextlib.suppress(TypeError):
                if len(self._binders) < 256:  # a new lambda per send would grow it without bound
                    self._binders[user_callback] = found
        self.last_keyed = (user_callback, found)
        return found

    def shared(self, user_callback: DeliveryCallback | None) -> Callable[..., None]:
        """The callback for a send without a key; the pair is also kept in ``last`` for the caller's inline
        check (``user, shared = direct.last``)."""
        try:
            found = self._shared.get(user_callback)
        except TypeError:  # an unhashable callable: its own callback object
            return self.keyed(user_callback)
        if found is None:
            # a callback may offer a fused twin (the message trace's): one frame that reports a success
            # itself and hands a failure to failed(user_callback, -1, err, m), as shared_report does; it is
            # given only messages sent without a key (and may rely on that)
            twin = getattr(user_callback, "direct_twin", None) if type(user_callback) is FunctionType else None
            found = twin(self.failed) if twin is not None else shared_report(user_callback, self.failed)
            if len(self._shared) < 256:  # a new lambda per send would grow it without bound
                self._shared[user_callback] = found
        self.last = (user_callback, found)
        return found

    def failed(self, user_callback: DeliveryCallback | None, order: int, err: RawKafkaError, m: Message) -> None:
        ts_type, ts = m.timestamp()
        msg = tuple.__new__(Outgoing, (m.topic(), m.value(), m.key(), -1, ts if ts_type else 0, m.headers(),
                                       user_callback))
        self.link._on_delivery(msg, order, self.client, err, m)


class ClusterLink:
    """The seam between the producer and one cluster: direct send, spill, and re-route of failures."""

    def __init__(self, cluster: str, client_factory: ClientFactory, health: ClusterHealth,
                 queue: SpillQueue | None, reroute: Callable[[str, Outgoing, RawKafkaError], None],
                 spill_enabled: Callable[[str], bool] | None = None, mailbox: Mailbox | None = None) -> None:
        self.cluster = cluster
        # user callbacks reached on engine threads wait for the owner's poll()
        self._mailbox = mailbox if mailbox is not None else Mailbox()
        self.health = health
        self.queue = queue
        self._factory = client_factory
        self._reroute = reroute
        self._spill_enabled = spill_enabled or (lambda _topic: True)
        self._lock = threading.RLock()
        self._poll_lock = threading.Lock()
        self._local = threading.local()
        self._client: RawProducer | None = None  # built on first direct send without a caller-owned client
        self._own_sent = self._own_reported = 0  # messages produced into / reported by the current _client
        self._external: list[RawProducer] = []  # caller-owned clients this link sent through
        self._last_external: RawProducer | None = None
        self.on_available: Callable[[str], None] | None = None
        self._order = itertools.count()  # produce order of direct sends
        self._undelivered: list[tuple[int, Outgoing, RawKafkaError]] = []
        self._retired: list[RawProducer] = []
        self._foreign: set[RawProducer] = set()  # retired caller-owned clients: their owner's poll serves them
        self._rerouting = False  # a poll is re-routing a batch taken out of _undelivered
        self._rerouting_left = 0  # of that batch, not yet spilled / sent to the standby / called back
        self.available = health.state is ClusterState.UP
        self._recovering = False
        self._down_since = 0.0
        self.counts = {"spilled": 0, "rerouted": 0, "failed": 0, "refused": 0, "stalled": 0}
        self._failure_log: dict[tuple[str, int], list[float]] = {}  # (topic, code): [last logged, not logged since]
        self.app_id: str | None = None  # named in a refusal's report
        health.on_refused = self._on_refused
        self.direct = 0  # hot-path counters as plain attributes
        self.longest_handover_ms = 0.0  # longest wait of a send to the partner cluster (hand_over)
        self.delivered = 0
        self.on_change: Callable[[], None] | None = None  # the owner drops cached direct routes
        self.on_spilled: Callable[[Outgoing], None] | None = None  # message trace: the "spilled" step

    def attach_queue(self, queue: SpillQueue) -> None:
        """The spill queue the disk refused at first (the engine's maintenance thread opens it later)."""
        with self._lock:
            self.queue = queue

    # --- sending ----------------------------------------------------------------------------------

    def client(self) -> RawProducer:
        with self._lock:
            if self._client is None:
                self._client = self._factory()
                self._own_sent = self._own_reported = 0
            return self._client

    def _own_holds(self) -> bool:
        """The link's own client holds messages not yet reported. Counted here, not by ``len()``: librdkafka's count
        includes events such as the statistics the stall watch reads every second, and taking one for a message made
        a caller's newer sends of a key follow into this client while older ones waited in the caller's (a node
        killed under load then stored them interleaved: the three-node soak's ``kill+control``)."""
        return self._client is not None and self._own_sent != self._own_reported

    def send(self, msg: Outgoing, spill_wait: bool | None = None, client: RawProducer | None = None) -> None:
        """Hand one message to the cluster (or to its spill queue while it cannot take it).

        ``client`` is a librdkafka producer owned by the caller (the ykafka Producer's client for this
        cluster, with its hot-config settings); without it the link uses its own. Messages a retired
        client still holds are older than this one: they are re-routed first, so a key's spilled records
        stay in the order they were produced."""
        if self.health.refused is not None and self.health.is_refused():  # fails now: not sent, not spilled
            self._fail_refused(msg, self.health.refused, None, later=True)
            return
        if self._retired or self._undelivered or self._rerouting:
            self._drain_retired()
        queue = self.queue
        with self._lock:  # decide and produce atomically with respect to mark_unavailable's purge
            if queue is None or (self.available and not queue.holds(msg[0], msg[2])) \
                    or not self._spill_enabled(msg[0]):
                if client is None:
                    client = self.client()
                elif self._client is not None and self._own_holds():
                    # our own client still holds messages (re-routed here from the partner cluster): a caller's
                    # client could deliver a newer message of their key first, so stay behind them until it is empty
                    client = self._client
                elif client is not self._last_external:
                    self._last_external = client
                    if client not in self._external:
                        self._external.append(client)
                if client is self._client and self._own_sent == self._own_reported and self._external \
                        and self.on_change is not None:
                    # the first message into our own client (re-routed here from the partner cluster) while callers
                    # may hold direct senders built when it was empty: they stop now, so their newer messages of its
                    # key come here, behind it (see direct_sender). Without this a caller's direct path went on and
                    # could store a newer message of the key first (found tracing the soak's overtaken_direct at a
                    # failback: docs/reliability.md, *Where the duplicates come from*)
                    self.on_change()
                # the hot path, inlined: (topic, value, key, partition, callback, on_delivery, ts, headers)
                client.produce(msg[0], msg[1], msg[2], msg[3], functools.partial(
                    self._on_delivery, msg, next(self._order), client), None, msg[4], msg[5])
                if client is self._client:  # produced (a refused produce raised above): its report will come
                    self._own_sent += 1
                self.direct += 1
                return
        if self._retired or self._undelivered or self._rerouting:
            self._drain_retired()
        self.spill(msg, wait=spill_wait)

    def direct_sender(self, topic: str, client: RawProducer) -> DirectSender | None:
        """What a caller needs to send ``topic`` straight through ``client`` instead of calling :meth:`send`
        per message (see :class:`DirectSender`); None while the topic must go through :meth:`send`
        (cluster unavailable, records waiting in the spill, a retired client draining, messages re-routed
        into the link's own client not yet delivered). The owner drops
        it when :attr:`on_change` fires."""
        with self._lock:
            if not self.available or self._retired or self._undelivered or self._rerouting \
                    or self.health.refused is not None \
                    or (self.queue is not None and self.queue.depth) \
                    or self._own_holds():  # re-routed messages still in our client
                return None
            if client not in self._external:
                self._external.append(client)
            return DirectSender(self, client)

    @property
    def draining(self) -> bool:
        """Retired clients still hold messages, or what they gave back is not re-routed yet."""
        return bool(self._retired or self._undelivered or self._rerouting)

    @property
    def must_hand_over(self) -> bool:
        """A send to the partner cluster must first wait for :meth:`hand_over`: retired clients are still
        giving back, or the cluster is DOWN while its clients are still in service."""
        return self.draining or (self.available and self.health.state is ClusterState.DOWN)

    def hand_over(self, leaving: bool = False) -> None:
        """Writes of a topic go to this cluster's DR partner: what this link's clients hold and may still
        give back (purged, timed out) must be re-routed before any newer message of its keys goes there.

        While the cluster is DOWN its clients are taken out of service at once, queued and in-flight
        messages purged (the health listener does so too, but a send may see the new route first).
        ``leaving``: a topic's route just moved away from this cluster while it is up (failback from the
        standby, a manual switch): if its clients still hold messages they are taken out of service too,
        but only the queued messages are purged; requests in flight complete where they were sent. Either
        way the caller waits until everything given back is re-routed, in produce order
        (:meth:`_drain_retired`)."""
        grace = 0.0
        if self.available:
            if self.health.state is ClusterState.DOWN:
                self.mark_unavailable("cluster down")
            elif leaving and self.outstanding():
                self.mark_unavailable("writes moved to the partner cluster", in_flight=False)
                grace = HANDOVER_GRACE_S
        if self._retired or self._undelivered or self._rerouting:
            started = time.monotonic()
            if grace:
                self._drain_retired(grace)
                if self._retired:  # requests in flight not answered within the grace: the cluster is not taking
                    # writes after all; purge them too (a broker that stores one later makes a duplicate)
                    with self._lock:
                        retired = list(self._retired)
                    for client in retired:
                        with contextlib.suppress(KafkaException):
                            client.purge(in_queue=True, in_flight=True, blocking=False)
                    log.warning("cluster.handover_purged_in_flight", cluster=self.cluster,
                                held=sum(len(c) for c in retired))
            self._drain_retired()
            waited_ms = (time.monotonic() - started) * 1000
            if waited_ms > self.longest_handover_ms:
                self.longest_handover_ms = waited_ms
                log.info("cluster.handover_wait", cluster=self.cluster, waited_ms=round(waited_ms, 1))

    def _drain_retired(self, timeout: float = 10.0) -> None:
        """Serve the delivery reports of retired (purged) clients until they hold nothing and what they
        gave back is re-routed: a new message must not reach the spill before older ones."""
        if getattr(self._local, "polling", False):
            return  # called from one of our own delivery callbacks: the outer poll is draining already
        if self._foreign and self._mailbox.holds_back:
            return  # an engine thread: the caller-owned clients drain through their owner's poll()
        deadline = time.monotonic() + timeout
        while (self._retired or self._undelivered) and time.monotonic() < deadline:
            self.poll(0.01, live=False)
        # another thread's poll may have emptied both lists and still be re-routing its batch: wait for it
        if self._poll_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            self._poll_lock.release()

    def spill(self, msg: Outgoing, wait: bool | None = None) -> int:
        assert self.queue is not None
        seq = self.queue.append(msg.topic, msg.value, msg.key, normalize_headers(msg.headers), msg.timestamp,
                                msg.partition, msg.on_delivery, wait=wait)
        self.counts["spilled"] += 1
        if self.on_spilled is not None:
            self.on_spilled(msg)
        return seq

    def _on_delivery(self, msg: Outgoing, order: int, client: RawProducer, err: RawKafkaError | None,
                     m: Message) -> None:
        if client is self._client:  # served by this link's poll only (one at a time): see _own_holds
            self._own_reported += 1
        if err is None:
            self.delivered += 1
            self.health.record_success()
            if msg[6] is not None:
                self._mailbox.deliver(msg[6], None, m)
            return
        self.health.on_error(err)
        # a purge we did not do is the application's own: report it, as librdkafka would
        user_purge = err.code() in (RawKafkaError._PURGE_QUEUE, RawKafkaError._PURGE_INFLIGHT) \
            and client not in self._retired
        refused = err if is_auth_error(err) else self.health.refused
        if refused is not None and (refused is err or (not user_purge and is_resendable(err))):
            # the broker refused the app, or the message came back after it did: failed, never spilled
            self._fail_refused(msg, refused, m)
            return
        if not user_purge and is_resendable(err):
            # Reports of queued and in-flight messages do not come back in produce order: collect them,
            # take the client out of service (the rest of its messages come back purged), and re-route the
            # lot in produce order once it holds nothing (see poll).
            self.counts["rerouted"] += 1
            self._undelivered.append((order, msg, err))
            if client is self._client or client in self._external:
                self.mark_unavailable(f"{err.name()}: {err.str()}")
            return
        self.counts["failed"] += 1
        self._log_failure(msg.topic, err)
        self._mailbox.deliver(msg.on_delivery, err, m)

    def _log_failure(self, topic: str, err: RawKafkaError) -> None:
        """Say that a message failed for good, neither spilled nor sent elsewhere: once per topic and error per
        :data:`FAILURE_LOG_INTERVAL_S`, with how many more failed meantime (a storm of one error is one line)."""
        key = (topic, err.code())
        now = time.monotonic()
        seen = self._failure_log.get(key)
        if seen is not None and now - seen[0] < FAILURE_LOG_INTERVAL_S:
            seen[1] += 1
            return
        if seen is None and len(self._failure_log) >= 1024:  # topics without end: forget, never grow
            self._failure_log.clear()
        log.warning("delivery.failed", cluster=self.cluster, topic=topic, error=err.name(), reason=err.str(),
                    more_since_last=int(seen[1]) if seen is not None else 0,
                    consequence="reported to the message's delivery callback; not spilled, not sent again")
        self._failure_log[key] = [now, 0]

    def refusal(self, topic: str, err: RawKafkaError | None = None) -> RawKafkaError | None:
        """What the delivery callback of a message to ``topic`` the cluster refuses gets (``err``, else the
        standing refusal), None when it does not refuse us: librdkafka's own error type, as confluent-kafka's
        callbacks expect (``err.code()``, ``err.str()``), its text the typed error's (app, cluster, topic)."""
        err = err if err is not None else self.health.refused
        if err is None:
            return None
        typed = from_kafka_error(err, app_id=self.app_id, cluster=self.cluster, resource=topic)
        return RawKafkaError(err.code(), str(typed), fatal=bool(err.fatal()), retriable=False)

    def _fail_refused(self, msg: Outgoing, err: RawKafkaError, m: Message | None, later: bool = False) -> None:
        self.counts["refused"] += 1
        self._mailbox.deliver(msg.on_delivery, self.refusal(msg.topic, err), m, later=later)

    def _on_refused(self) -> None:
        """The cluster refused our credentials: direct senders stop (their sends come to :meth:`send`)."""
        log.warning("cluster.link_refused", cluster=self.cluster, app=self.app_id,
                    consequence="sends fail with BrokerAuthError until a delivery or new credentials; none spilled")
        if self.on_change is not None:
            self.on_change()

    def _reroute_undelivered(self) -> None:
        """Re-route what retired clients gave back, oldest produce first. Called with the poll lock held."""
        # flagged while the batch is re-routed: a send that finds both lists empty must still wait behind it
        self._rerouting = True
        try:
            # taken and counted in one step under the lock outstanding() reads with: before, the batch was sorted
            # out of the list (a report appended meanwhile, from the owner's poll of its client, was dropped with
            # the old list) and counted only after a pass over it and a log line, and in that gap outstanding()
            # said 0 while nothing was in the spill yet: wait_idle() returned True and the spill then filled with
            # 7,783 records (tests/test_failover_chaos.py, fresh partitions: "lost" 635 when it read back)
            with self._lock:
                batch, self._undelivered = self._undelivered, []
                self._rerouting_left = len(batch)
            batch.sort(key=lambda item: item[0])
            codes: dict[str, int] = {}
            for _order, _msg, err in batch:
                codes[err.name()] = codes.get(err.name(), 0) + 1
            log.info("cluster.rerouting", cluster=self.cluster, messages=len(batch), errors=codes)
            for _order, msg, err in batch:
                self._reroute(self.cluster, msg, err)  # spill, standby, or the caller's callback
                self._rerouting_left -= 1
        finally:
            self._rerouting_left = 0
            self._rerouting = False

    # --- state ------------------------------------------------------------------------------------

    def mark_unavailable(self, reason: str, in_flight: bool = True) -> None:
        """Stop sending directly: purge what librdkafka still holds so it comes back to be re-routed in
        order, and retire the client (its idempotence state may not survive the cluster's restart).
        ``in_flight=False``: requests already sent are left to complete (a cluster that answers: purging
        them would send again what it is storing); they are served from the retired client."""
        with self._lock:
            if not self.available:
                return
            self.available = False
            self._down_since = time.monotonic()
            if self.on_change is not None:  # direct senders stop before the purge below
                self.on_change()
            clients = ([self._client] if self._client is not None else []) + self._external
            self._foreign.update(self._external)
            self._client, self._external, self._last_external = None, [], None
            held = 0
            for client in clients:
                held += len(client)
                # retired before the purge: another thread's poll of this client may serve the purged reports at
                # once, and a purge report from a client not retired is the application's own (reported failed)
                self._retired.append(client)
                with contextlib.suppress(KafkaException):
                    client.purge(in_queue=True, in_flight=in_flight, blocking=False)
        log.warning("cluster.link_down", cluster=self.cluster, reason=reason, held=held)
        self.health.suspect(reason)  # probe now: the link comes back after the next successful probe

    def stalled(self, reason: str) -> None:
        """A partition of one of the link's clients held messages and delivered none for ``spill.after.ms``
        (:class:`ykafka.dr.stall.StallWatch`, on the thread polling that client): the cluster is failing, as
        librdkafka's timeouts said before, and every client is purged at once, so everything comes back in
        produce order (none of it timed out inside librdkafka, so nothing newer was stored ahead of it)."""
        self.counts["stalled"] += 1
        self.health.stalled(reason)
        self.mark_unavailable(reason)

    def mark_available(self) -> None:
        with self._lock:
            if self.available or self._recovering:
                return
            self._recovering = True
        try:
            # before any direct send: the owner rebuilds its clients (fresh idempotence state for a restarted
            # cluster). Outside our lock: the owner takes its own lock first and ours second (lock order).
            if self.on_available is not None:
                self.on_available(self.cluster)
            with self._lock:
                self.available = True
        finally:
            self._recovering = False
        if self.on_change is not None:
            self.on_change()
        log.info("cluster.link_up", cluster=self.cluster)

    def maybe_recover(self) -> bool:
        """Send directly again once a probe reached the cluster after the link went down."""
        if not self.available and self.health.state is ClusterState.UP \
                and self.health.last_probe_ok > self._down_since:
            self.mark_available()
            return True
        return False

    def on_state(self, state: ClusterState) -> None:
        if state is ClusterState.DOWN:
            self.mark_unavailable("cluster down")
        else:
            self.mark_available()

    def poll(self, timeout: float = 0.0, live: bool = True) -> int:
        """Serve delivery reports of retired clients still draining, then of the live client. One thread
        at a time, so re-routed messages are spilled in the order their reports arrive."""
        served = 0
        if not self._poll_lock.acquire(timeout=max(timeout, 0.05)):
            return 0
        self._local.polling = True
        try:
            with self._lock:
                client = self._client
                retired = list(self._retired)
            if self._foreign and self._mailbox.holds_back:  # their reports call the user back: owner's poll only
                retired = [old for old in retired if old not in self._foreign]
            for old in retired:
                if old not in self._retired:  # forgotten meanwhile (its owner closed it from a callback)
                    continue
                # a direct sender may have produced into it after the purge (it checks no lock): give
                # such stragglers back now so they are re-routed with the rest, in produce order
                with contextlib.suppress(KafkaException):
                    old.purge(in_queue=True, in_flight=False, blocking=False)
                served += old.poll(0)
                if len(old) == 0:
                    with self._lock:
                        own = old in self._retired and old not in self._foreign
                        if old in self._retired:
                            self._retired.remove(old)
                            self._foreign.discard(old)
                    if own:
                        close_producer(old)  # drained: its threads and connections go now
            if live and client is not None:
                served += client.poll(timeout)
            if self._undelivered and not self._retired:
                self._reroute_undelivered()
        finally:
            self._local.polling = False
            self._poll_lock.release()
        if live and client is None and timeout:
            time.sleep(timeout)
        return served

    def outstanding(self, external: bool = True) -> int:
        """Messages handed to librdkafka and not yet reported (live and retired clients; ``external``:
        also the caller-owned clients, which only their owner polls)."""
        with self._lock:
            clients = ([self._client] if self._client is not None else []) + self._retired
            if external:
                clients += self._external
            # given back and not re-routed yet: a flush (and close) that stopped waiting here would close the
            # spill under a re-route still writing to it (SIGTERM while the link went down lost them all)
            given_back = len(self._undelivered) + self._rerouting_left
        return sum(len(c) for c in clients) + given_back

    def flush(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.outstanding() and time.monotonic() < deadline:
            self.poll(min(0.05, max(0.0, deadline - time.monotonic())))
        return self.outstanding()

    def status(self) -> dict[str, Any]:
        return {"available": self.available, "outstanding": self.outstanding(), "direct": self.direct,
                "delivered": self.delivered, "longest_handover_ms": round(self.longest_handover_ms, 1),
                **self.counts}

    @property
    def serves_owner(self) -> bool:
        """Caller-owned clients retired here wait for the owner's poll (see :attr:`Mailbox.holds_back`)."""
        return bool(self._foreign)

    def forget(self, client: RawProducer) -> None:
        """The caller closes ``client`` (drained, replaced): drop every reference to it, after any poll of it."""
        with self._lock:
            if client is self._last_external:
                self._last_external = None
            if client in self._external:
                self._external.remove(client)
            if client in self._retired:
                self._retired.remove(client)
            self._foreign.discard(client)
        if getattr(self._local, "polling", False):
            return  # asked from a callback inside our own poll: that poll skips forgotten clients
        with self._poll_lock:  # a poll that took it before the removal is done with it
            pass

    def close(self, timeout: float = 5.0) -> None:
        """Flush, then close the link's own clients (caller-owned ones are their owner's to close)."""
        self.flush(timeout)
        with self._lock:
            own = ([self._client] if self._client is not None else []) + \
                [c for c in self._retired if c not in self._foreign]
            self._client = None
            self._retired.clear()
            self._external.clear()
            self._foreign.clear()
            self._last_external = None
        for client in own:
            close_producer(client)  # one still holding messages is left to the garbage collector


