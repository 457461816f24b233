"""Dual-DC routing, spill and failback: the disaster-recovery engine a producer sends through.

Principles (docs/architecture.md): lose no data, writes come first, consumers may pause.

* Primary A takes all writes of a topic (``route.cluster``). With ``route.standby`` B and
  ``route.failover=auto``, writes move to B while A is DOWN and B is UP; ``route.active=standby`` (or
  :meth:`DisasterRecovery.switch`) moves them by hand, whatever the health says.
* When A is back (or the switch is undone), writes return to A at once, and a :class:`SyncJob` copies
  what was written to B during the outage back to A: it consumes B from the offsets recorded before the
  first outage write (or from the sync group's committed offsets), produces to A, and commits on B only
  after A acknowledged. At-least-once; resumable from the committed group and a progress file.
* A cluster with nowhere to go (no standby, or both down) spills to its local disk queue and replays
  when it answers again (:mod:`ykafka.dr.link`, :mod:`ykafka.dr.replay`, :mod:`ykafka.dr.queue`).
* Operators switch a cluster's writes by hand with ``ykafka admin failover`` (:mod:`ykafka.admin.failover`).

Routing is decided without side effects (:class:`~ykafka.dr.routes.RouteTable`, :meth:`DisasterRecovery.target`)
and committed by the maintenance thread, or first by a send that saw the move before it (:meth:`_commit`);
outages and their failback syncs live in :mod:`ykafka.dr.outages`.

Known order caveat: per-key order holds on one cluster (spill and replay keep it); across a failover a
key's outage records reach A through the sync job, after A's new writes of that key.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from ykafka import headers as H
from ykafka.dr.health import ClusterState, HealthMonitor, HealthPolicy
from ykafka.dr.journal import DeliveryCallback, SpillRecord
from ykafka.dr.link import ClusterLink, DirectSender, Outgoing
from ykafka.dr.mailbox import Mailbox, mark_internal
from ykafka.dr.outages import Outages
from ykafka.dr.queue import SpillQueue
from ykafka.dr.replay import Replayer, replay_config
from ykafka.dr.routes import RouteSpec, RouteTable
from ykafka.dr.spilldir import SPILL_DEFAULTS
from ykafka.dr.stall import StallWatch, backstop_timeout_ms, stats_interval_ms
from ykafka.dr.sync import connection_only
from ykafka.errors import ClosedError, SpillFullError
from ykafka.observability import merge_statistics
from ykafka.transport import (
    Message,
    RawKafkaError,
    RawProducer,
    is_auth_error,
    new_producer,
)

log = structlog.get_logger(__name__)

__all__ = ["DisasterRecovery", "DrOptions", "RouteSpec"]  # RouteSpec: ykafka.dr.routes, re-exported


# --- the engine ---------------------------------------------------------------------------------------

@dataclass
class DrOptions:
    """Local settings of the engine (``ykafka.spill.*`` options and a few knobs for tests)."""

    spill_dir: Path
    spill_max_bytes: int = SPILL_DEFAULTS.max_bytes
    spill_commit: str = SPILL_DEFAULTS.commit
    spill_fsync: bool = SPILL_DEFAULTS.fsync
    spill_async_max_pending: int = SPILL_DEFAULTS.async_max_pending
    autopoll: bool = True
    sync_idle_s: float = 2.0
    replay_stall_s: float = 15.0
    progress_interval_s: float = 5.0
    extra_client_conf: dict[str, Any] = field(default_factory=dict)
    #: the app sending, named in the BrokerAuthError of a message the broker refuses
    app_id: str | None = None
    #: user callbacks reached on the engine's threads wait for the owner's poll() / flush() (a Producer's
    #: contract); standalone, they run where the report arrives
    defer_callbacks: bool = False


class DisasterRecovery:
    """Routes each message to its cluster's link (primary or standby), spills, replays, and syncs back.

    ``rdkafka_config(cluster)`` gives the librdkafka producer settings of a cluster (connection and
    catalog-derived producer properties); ``route(topic)`` gives its :class:`RouteSpec`;
    ``spill_after_ms(cluster)`` the ``spill.after.ms`` that becomes the direct client's
    ``message.timeout.ms``; ``health_policy(cluster)`` the thresholds.
    """

    def __init__(self, rdkafka_config: Callable[[str], Mapping[str, Any]], route: Callable[[str], RouteSpec],
                 options: DrOptions, spill_after_ms: Callable[[str], int] | None = None,
                 health_policy: Callable[[str], HealthPolicy] | None = None,
                 client_factory: Callable[[str, dict[str, Any]], RawProducer] | None = None) -> None:
        self._rdkafka_config = rdkafka_config
        self._route = route
        self.options = options
        self._spill_after_ms = spill_after_ms or (lambda _c: 10_000)
        self._client_factory = client_factory or (lambda _cluster, conf: new_producer(conf, "dr"))
        # everything started here is stopped by close(), in reverse order, whatever fails on the way; a
        # failure while starting unwinds what was already started
        self._exit = contextlib.ExitStack()
        with self._exit:  # unwound unless construction completes
            self.on_close: list[Callable[[], None]] = []
            self._exit.callback(self._run_close_hooks)
            self.health = HealthMonitor(self._health_conf, health_policy)
            self._exit.callback(self.health.close)
            self.health.add_listener(self._on_health)
            self._lock = threading.RLock()
            self.mailbox = Mailbox(options.defer_callbacks)
            self._links: dict[str, ClusterLink] = {}
            self._queueless: set[str] = set()  # links whose spill queue the disk refused (see _open_queue)
            self._replayers: dict[str, Replayer] = {}
            self._table = RouteTable(route, self.health.is_up)
            self._recommit = False  # health or a switch may have moved routes: the maintenance thread commits them
            self._failback = False  # a route went back to its primary: the maintenance thread ends its outage now
            self._outages = Outages(options.spill_dir / "failback", rdkafka_config, self.health,
                                    lambda standby: self.link(standby).outstanding() == 0, options.sync_idle_s,
                                    options.progress_interval_s)
            self._closed = threading.Event()
            self.on_link_available: Callable[[str], None] | None = None  # the owner rebuilds its clients
            self.on_change: list[Callable[[], None]] = []  # routes / link states moved: drop cached direct sends
            # message trace of spill steps: trace_step(kind, cluster, topic, key, headers, delivered message or None)
            self.trace_step: Callable[[str, str, str, Any, Any, Message | None], None] | None = None
            self.epoch = 0  # bumped with every change: a direct path computed before one is stale
            #: (primary, topic) -> when strict failback order began holding its writes (see _holds)
            self._held: dict[tuple[str, str], float] = {}
            self._watches: dict[tuple[str, int], StallWatch] = {}  # (cluster, spill.after.ms): see watch_stalls
            self._hold_expired: set[tuple[str, str]] = set()
            self._maint = threading.Thread(target=self._maintain, name="ykafka-dr", daemon=True)
            self._exit.callback(self._close_links)
            self._exit.callback(self._close_replayers)
            self._exit.callback(self._stop_syncs)
            for sub in sorted(p.name for p in options.spill_dir.iterdir() if p.is_dir() and p.name != "failback"):
                try:
                    self.link(sub)  # open leftover spill queues so they replay
                except Exception as exc:
                    log.warning("spill.leftover_skipped", cluster=sub, error=str(exc))
            self._maint.start()
            self._exit.callback(self._stop_maintenance)
            self._exit = self._exit.pop_all()

    # --- clients ----------------------------------------------------------------------------------

    def _health_conf(self, cluster: str) -> dict[str, Any]:
        return connection_only(self._rdkafka_config(cluster))

    def _direct_conf(self, cluster: str) -> dict[str, Any]:
        conf = dict(self._rdkafka_config(cluster))
        conf.setdefault("reconnect.backoff.max.ms", 1000)
        conf.update(self.options.extra_client_conf)
        # Idempotent wherever it can be (acks=all, the default, and the application did not switch it off): a
        # produce request whose answer is lost (a connection cut or stalled after the broker stored it) is sent again
        # by librdkafka, and a plain producer then stores it twice: the soak's `lossy` network fault left 18
        # direct+direct copies in 2 minutes (seed 1), 0 idempotent; tests/test_dr_network.py cuts answers
        # mid-request. Without it (acks other than all: librdkafka refuses idempotence then; a Producer's client
        # settings say enable.idempotence=false after a push of producer.acks=1) one request at a time keeps the
        # order: a pipelining plain producer stores a batch a just-restarted broker refused behind the next one
        # (issue 31's failback test: keys 5, 7 and 1 had 11685-11699 stored after 11701-11705; 86 of 57,202
        # records overtaken in one of three runs, 0 of 181,000 idempotent), but its retries can still be stored
        # twice. (An earlier attempt, d9c4b5e, was reverted for a red frozen-primary test whose cause was the
        # test's heal timing, 0d1975d.)
        # One request in flight per connection either way (unless the application set it): a 3-node soak with
        # idempotent clients pipelining up to 5 (seed 1, a node killed under load) had 9 direct writes stored behind
        # a newer write of their key: older records of a partition timed out in the client while newer ones were
        # stored, and the engine re-sent the older ones from the spill.
        acks = str(conf.get("acks", conf.get("request.required.acks", "all"))).lower()
        if acks in ("all", "-1"):
            conf.setdefault("enable.idempotence", True)
        conf.setdefault("max.in.flight.requests.per.connection", 1)
        # spill.after.ms is the link's stall watch (ykafka.dr.stall), not librdkafka's per-message timeout: a
        # message timed out alone lets newer ones of its partition be stored ahead of it (an epoch bump)
        self.watch_stalls(conf, cluster, int(self._spill_after_ms(cluster)))
        conf["error_cb"] = self.health.error_cb(cluster, conf.get("error_cb"))
        return conf

    def watch_stalls(self, conf: dict[str, Any], cluster: str, stall_ms: int) -> None:
        """Make ``conf`` (a direct client's librdkafka settings on ``cluster``) give its messages back after
        ``stall_ms`` without delivery: an idempotent client through the link's stall watch, with librdkafka's
        per-message timeout only a backstop past it (see :mod:`ykafka.dr.stall`). The watch is one object per
        cluster and threshold, so the settings, a client's cache key, compare equal across resolutions."""
        conf.pop("delivery.timeout.ms", None)  # librdkafka's alias would override what is set here
        if str(conf.get("enable.idempotence", "")).lower() not in ("true", "1"):
            # a plain producer reports no acknowledged ids to watch, and keeps no order across failures anyway
            # (docs/disaster-recovery.md, *Guarantees and limits*): librdkafka's per-message timeout it is
            conf["message.timeout.ms"] = stall_ms
            return
        key = (cluster, stall_ms)
        watch = self._watches.get(key)
        if watch is None:
            watch = self._watches.setdefault(key, StallWatch(cluster, stall_ms,
                                                             lambda reason: self.link(cluster).stalled(reason)))
        conf["message.timeout.ms"] = backstop_timeout_ms(stall_ms)
        merge_statistics(conf, {"statistics.interval.ms": stats_interval_ms(stall_ms), "stats_cb": watch})

    def link(self, cluster: str) -> ClusterLink:
        found = self._links.get(cluster)
        if found is not None:
            return found
        with self._lock:
            link = self._links.get(cluster)
            if link is not None:
                return link
            health = self.health.cluster(cluster)
            queue = self._open_queue(cluster)
            link = ClusterLink(cluster, lambda: self._client_factory(cluster, self._direct_conf(cluster)), health,
                               queue, self._reroute, lambda topic: self._route(topic).spill, self.mailbox)
            link.on_available = self._link_available
            link.app_id = self.options.app_id
            link.on_change = self._changed
            link.on_spilled = lambda msg: self._trace("spilled", cluster, msg.topic, msg.key, msg.headers, None)
            self._links[cluster] = link
            if queue is not None:
                self._start_replayer(cluster, queue)
            return link

    def _open_queue(self, cluster: str) -> SpillQueue | None:
        """The cluster's spill queue; None while its disk refuses to open one (full, read-only, gone).

        A link is made the first time a message needs its cluster, which may be in the middle of an outage on
        a full disk: the queue's files cannot be created then. Raising there raised out of the caller's
        ``produce`` (a 30-minute soak's producer died of ENOSPC at a failover), so the link starts without a
        spill (its messages go straight to the cluster, or fail with their own error) and the maintenance
        thread opens the queue once the disk takes it (docs/reliability.md, the seed-3 30-minute run)."""
        try:
            return SpillQueue(self.options.spill_dir, cluster, max_bytes=self.options.spill_max_bytes,
                              commit="async" if self.options.spill_commit == "async" else "sync",
                              fsync=self.options.spill_fsync,
                              async_max_pending=self.options.spill_async_max_pending,
                              on_commit_error=lambda dropped, exc: self._spill_dropped(cluster, dropped, exc))
        except (OSError, sqlite3.Error) as exc:
            log.warning("spill.queue_unavailable", cluster=cluster, error=str(exc))
            self._queueless.add(cluster)
            return None

    def _spill_dropped(self, cluster: str, dropped: list[tuple[SpillRecord, DeliveryCallback | None]],
                       exc: Exception) -> None:
        """Records spilled only in memory (a re-routed message, a failback's held one) whose commit to the disk
        failed: each is reported failed to its callback. Before, nothing was wired here and they vanished
        without a callback (an 8-minute soak, seed 107, strict failback order on a full disk: 8 sends without
        one; docs/reliability.md)."""
        log.error("spill.dropped", cluster=cluster, records=len(dropped), error=str(exc))
        err = RawKafkaError(RawKafkaError._QUEUE_FULL, f"undeliverable: its spill to {cluster} was not committed "
                            f"({exc})")
        for _record, callback in dropped:
            self.mailbox.deliver(callback, err, None, later=True)  # the queue's writer thread: the owner's poll runs it

    def _start_replayer(self, cluster: str, queue: SpillQueue) -> None:
        def replay_client() -> RawProducer:
            conf = replay_config(self._rdkafka_config(cluster))
            conf["error_cb"] = self.health.error_cb(cluster)
            return self._client_factory(cluster, conf)

        replayer = self._replayers[cluster] = Replayer(
            queue, replay_client, lambda: self.health.is_up(cluster) and not self._holding(cluster),
            stall_s=self.options.replay_stall_s,
            progress_interval_s=self.options.progress_interval_s, mailbox=self.mailbox)
        replayer.on_replayed = lambda rec, m: self._trace("replayed", cluster, rec.topic, rec.key, rec.headers, m)
        if queue.depth:
            replayer.kick()

    def _reopen_queues(self) -> None:
        """Open the spill queues a refusing disk kept closed (maintenance thread)."""
        for cluster in sorted(self._queueless):
            with self._lock:
                link = self._links.get(cluster)
                if link is None or link.queue is not None:
                    self._queueless.discard(cluster)
                    continue
                self._queueless.discard(cluster)
                queue = self._open_queue(cluster)
                if queue is None:
                    continue
                link.attach_queue(queue)
                self._start_replayer(cluster, queue)
                log.info("spill.available", cluster=cluster)
            self._changed()

    def suspect_all(self, reason: str) -> None:
        """A client error that names no cluster: probe every cluster now."""
        for name in list(self.health.status()):
            self.health.cluster(name).suspect(reason)

    def client_error(self, err: RawKafkaError, cluster: str | None = None) -> None:
        """Feed an ``error_cb`` error of a client the engine does not own (``cluster``: whose client, if known).
        A cluster refusing the app's credentials is told so (its link then fails sends instead of spilling)."""
        if err.code() in (RawKafkaError._ALL_BROKERS_DOWN, RawKafkaError._TRANSPORT):
            self.suspect_all(err.name())
        elif cluster is not None and is_auth_error(err):
            link = self._links.get(cluster)
            if link is not None:
                link.health.on_error(err)

    def _link_available(self, cluster: str) -> None:
        if self.on_link_available is not None:
            try:
                self.on_link_available(cluster)
            except Exception:
                log.exception("failover.link_available_hook_failed", cluster=cluster)

    def _trace(self, kind: str, cluster: str, topic: str, key: Any, headers: Any, m: Message | None) -> None:
        step = self.trace_step
        if step is not None:
            try:
                step(kind, cluster, topic, key, headers, m)
            except Exception:  # tracing degrades, never breaks a spill or a replay
                log.exception("failover.trace_failed", kind=kind, topic=topic)

    def _changed(self) -> None:
        self.epoch += 1
        self._recommit = True
        for listener in list(self.on_change):
            try:
                listener()
            except Exception:
                log.exception("failover.change_listener_failed")

    # --- routing: a pure decision (RouteTable.decide), committed before a write goes by it ----------

    def target(self, topic: str) -> str:
        """The cluster that takes the next write of ``topic`` now. No side effects (see :meth:`_commit`)."""
        return self._table.decide(topic)[1]

    def open_link(self, topic: str, cluster: str) -> None:
        """``topic``'s client on ``cluster`` is about to be built: open the cluster's link (its spill queue on disk,
        ~35 ms) first when the topic's writes go there, so the client's first message follows it at once."""
        if self.target(topic) == cluster:
            self.link(cluster)

    def direct(self, topic: str, cluster: str, client: RawProducer) -> DirectSender | None:
        """The healthy-cluster fast path: a :class:`DirectSender` when ``topic``'s writes go to ``cluster`` (its
        primary) now, nothing is left to hand over or sync back, and may go straight through the caller's
        ``client`` (see :meth:`ClusterLink.direct_sender`), else None. Valid until an :attr:`on_change`
        listener fires; a caller re-checks a None within seconds."""
        spec, now = self._table.decide(topic)
        if now != cluster or now != spec.primary or topic in self._table.moved \
                or self._outages.known(spec.primary, topic):
            return None
        committed = self._table.committed.get(topic)
        if committed is not None and committed[1] != now:
            return None  # a move no send committed yet: produce() hands the old cluster's messages over first
        if committed is None or committed[0] is not spec:
            self._table.commit(topic, spec, now)  # nothing moves: recorded for status() and later moves
        return self.link(cluster).direct_sender(topic, client)

    def handing_over(self, topic: str) -> bool:
        """Whether a send of ``topic`` may wait now: for a hand-over (:meth:`ClusterLink.hand_over`: its route
        moved, or a cluster of its route is DOWN with clients not yet out of service or gives back what they
        held) or for the standby's start offsets of an outage. The asyncio producer sends such messages off its
        event loop."""
        if topic in self._table.moved:
            return True
        spec, cluster = self._table.decide(topic)
        if spec.standby is None:
            return False
        committed = self._table.committed.get(topic)
        if (committed is not None and committed[1] != cluster) or (
                cluster != spec.primary and not self._outages.is_open(spec.primary, topic)):
            return True
        for name in (spec.primary, spec.standby):
            link = self._links.get(name)
            if link is not None and link.must_hand_over:
                return True
        return False

    def _decide_for_write(self, topic: str) -> tuple[RouteSpec, str]:
        """The route of a write about to go out: decided, and committed first if the maintenance thread has not
        yet (a write to the standby waits until its outage recorded where it starts)."""
        spec, cluster = self._table.decide(topic)
        if self._uncommitted(topic, spec, cluster):
            self._commit(topic, spec, cluster)
        return spec, cluster

    def _uncommitted(self, topic: str, spec: RouteSpec, cluster: str) -> bool:
        """The decision is not (all) committed yet: the route differs, or a route to the standby has no open outage."""
        return not self._table.is_committed(topic, spec, cluster) or (
            cluster != spec.primary and not self._outages.is_open(spec.primary, topic))

    def _commit(self, topic: str, spec: RouteSpec, cluster: str) -> None:
        """Record the route decision (and a move, handed over by the topic's next send); a route to the standby
        opens the topic's outage (the standby's end offsets: a network call). Ending outages and starting their
        syncs is the maintenance thread's (:meth:`_check_outages`)."""
        moved = self._table.commit(topic, spec, cluster)
        if cluster != spec.primary and spec.standby is not None:
            self._outages.begin(spec.primary, spec.standby, topic)
        elif moved and self._outages.known(spec.primary, topic):
            self._failback = True

    def _commit_routes(self) -> None:
        """The maintenance thread's commit of every known topic's route (after a health change or a switch), so
        a send rarely finds anything to commit."""
        for topic in list(self._table.committed):
            spec, cluster = self._table.decide(topic)
            if self._uncommitted(topic, spec, cluster):
                self._commit(topic, spec, cluster)

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: Callable[[Any, Any], Any] | None = None, timestamp: int = 0, headers: Any = None,
                spill_wait: bool | None = None, client: RawProducer | None = None,
                client_cluster: str | None = None) -> None:
        """Send one message: to the topic's active cluster, or durably into its spill queue.

        ``client`` / ``client_cluster``: the caller's own librdkafka producer for that cluster, used when
        the message goes there directly (the ykafka Producer passes its hot-configured client)."""
        msg = tuple.__new__(Outgoing, (topic, value, key, -1 if partition is None else partition, timestamp or 0,
                                       headers, on_delivery))
        spec, cluster = self._decide_for_write(topic)
        if spec.standby is not None:
            if cluster != spec.primary:
                msg = self._tagged(msg)
            # the route's other cluster may still hold older messages of this topic that will come back
            # (purged, failed) and be re-routed here: they go first, so a key is never overtaken
            other_name = spec.standby if cluster == spec.primary else spec.primary
            leaving = self._table.take_move(topic, other_name) if self._table.moved else False
            other = self._links.get(other_name)
            if other is not None:
                if leaving:
                    other.hand_over(leaving=True)
                elif other.must_hand_over:
                    other.hand_over()
            if spec.failback_order == "strict" and cluster == spec.primary and self._holds(spec, topic):
                self.link(cluster).spill(msg, wait=spill_wait)
                return
        self.link(cluster).send(msg, spill_wait, client if client_cluster == cluster else None)

    def _holds(self, spec: RouteSpec, topic: str) -> bool:
        """Strict failback order: ``topic``'s writes are back on its primary while its outage is not synced back
        yet, so they wait in the primary's spill (replayed once the sync is done) for at most the route's hold."""
        key = (spec.primary, topic)
        if not spec.spill or not self._outages.known(spec.primary, topic):
            if self._held.pop(key, None) is not None:
                self._hold_expired.discard(key)
                log.info("failback.hold_end", topic=topic, primary=spec.primary)
            return False
        since = self._held.setdefault(key, time.monotonic())
        if time.monotonic() - since <= spec.failback_hold_ms / 1000:
            return True
        if key not in self._hold_expired:
            self._hold_expired.add(key)
            log.warning("failback.hold_expired", topic=topic, primary=spec.primary,
                        held_s=round(time.monotonic() - since, 1),
                        consequence="new writes go on while the sync still copies: keys may be out of order")
        return False

    def _holding(self, cluster: str) -> bool:
        """A strict-order topic of ``cluster`` is held for its failback sync: the spill's replay waits too (it would
        put the held writes ahead of the records the sync still copies)."""
        return any(primary == cluster and self._holds(self._route(topic), topic) for primary, topic in list(self._held))

    def _tagged(self, msg: Outgoing) -> Outgoing:
        """``msg`` carrying this engine's writer id (``ykafka-dr-writer``), as every write to a standby does: the
        failback sync of this process copies back exactly those records (:mod:`ykafka.dr.sync`)."""
        headers = msg.headers
        if isinstance(headers, dict):
            if H.DR_WRITER in headers:
                return msg
            tagged: Any = {**headers, H.DR_WRITER: self._outages.writer_header}
        else:
            pairs = list(headers or ())
            if any(name == H.DR_WRITER for name, _value in pairs):
                return msg
            pairs.append((H.DR_WRITER, self._outages.writer_header))
            tagged = pairs
        return msg._replace(headers=tagged)

    def _reroute(self, failed_cluster: str, msg: Outgoing, err: RawKafkaError) -> None:
        """A message came back from ``failed_cluster`` undelivered: send it where the route now says,
        or spill it (asynchronously: it only ever lived in memory), or report it failed."""
        refused = self._links[failed_cluster].refusal(msg.topic) if failed_cluster in self._links else None
        if refused is not None:  # refused by the broker meanwhile: failed, neither spilled nor sent to the standby
            self._links[failed_cluster].counts["refused"] += 1
            self.mailbox.deliver(msg.on_delivery, refused, None)
            return
        spec, cluster = self._decide_for_write(msg.topic)
        link = self.link(cluster)
        try:
            if cluster != failed_cluster:
                if cluster != spec.primary:
                    msg = self._tagged(msg)
                elif spec.failback_order == "strict" and self._holds(spec, msg.topic):
                    link.spill(msg, wait=False)  # given back by the standby at failback: held with the new writes
                    return
                link.send(msg, spill_wait=False)  # the partner (it spills there if it must)
                return
            if spec.spill and link.queue is not None:
                link.spill(msg, wait=False)
                return
        except (SpillFullError, ClosedError) as exc:  # no caller to raise to: report it, loudly
            log.error("spill.rejected", topic=msg.topic, cluster=cluster, error=str(exc))
            err = RawKafkaError(RawKafkaError._QUEUE_FULL, f"undeliverable and not spilled: {exc}")
        self.mailbox.deliver(msg.on_delivery, err, None)

    # --- health and maintenance -------------------------------------------------------------------

    def _on_health(self, cluster: str, state: ClusterState) -> None:
        link = self._links.get(cluster)
        if link is not None:
            link.on_state(state)
        self._changed()  # a standby route may move with any cluster's health
        if state is ClusterState.UP:
            replayer = self._replayers.get(cluster)
            if replayer is not None:
                replayer.kick()
        self._check_outages()

    def _check_outages(self) -> None:
        """End the outages whose topics write to their primary again (their syncs start)."""
        for primary, topic in self._outages.entries():
            if self._outages.syncing(primary, topic):
                continue
            spec = self._route(topic)
            if self._back_on(primary, spec):
                self._outages.end(primary, topic)
            elif spec.primary != primary:
                self._outages.ended_elsewhere(primary, topic, spec.primary)

    def _back_on(self, primary: str, spec: RouteSpec) -> bool:
        """The writes of a topic whose outage was on ``primary`` go to it again."""
        return spec.primary == primary and not self._table.wants_standby(spec)

    def _failback_due(self) -> bool:
        """An open outage whose topic writes to its primary again, not yet ended by the maintenance thread."""
        return any(self._outages.is_open(primary, topic) and self._back_on(primary, self._route(topic))
                   for primary, topic in self._outages.entries())

    def _maintain(self) -> None:
        mark_internal()
        last_check = 0.0
        while not self._closed.is_set():
            for link in list(self._links.values()):
                if link.maybe_recover():
                    replayer = self._replayers.get(link.cluster)
                    if replayer is not None:
                        replayer.kick()
            if self.options.autopoll:
                served = 0
                for link in list(self._links.values()):
                    served += link.poll(0)
                if not served:
                    self._closed.wait(0.02)
            else:
                self._closed.wait(0.5)
            periodic = time.monotonic() - last_check > 1.0
            if self._recommit or self._failback or periodic:  # routes that health, a switch or hot config moved
                self._recommit = False
                try:
                    self._commit_routes()
                    if periodic or self._failback:
                        self._failback = False
                        last_check = time.monotonic()
                        self._check_outages()
                    if self._queueless and periodic:
                        self._reopen_queues()
                except Exception:
                    log.exception("failover.maintenance_error")

    # --- operator API -----------------------------------------------------------------------------

    def switch(self, primary: str, to: str | None) -> None:
        """In-process manual switch of every topic whose primary is ``primary``: ``standby``, ``primary``
        (failback: starts the sync), or None (follow hot config and health again)."""
        if to is None:
            self._table.forced.pop(primary, None)
        elif to in ("primary", "standby"):
            self._table.forced[primary] = to
        else:
            raise ValueError("to must be primary, standby or None")
        log.warning("failover.switch", primary=primary, to=to)
        self._check_outages()
        self._changed()

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery reports of the engine's clients (and of the owner's clients retired here) and run the
        callbacks deferred from its threads, on the caller's thread."""
        links = list(self._links.values())
        served = sum(link.poll(0) for link in links) + self.mailbox.serve()
        if not served and timeout:
            time.sleep(timeout)
        return served

    @property
    def needs_poll(self) -> bool:
        """The owner's poll() has work here: deferred callbacks, or its retired clients to drain."""
        return bool(len(self.mailbox)) or any(link.serves_owner for link in list(self._links.values()))

    def forget_client(self, client: RawProducer) -> None:
        """The owner closes ``client``: no link keeps or polls it any more."""
        for link in list(self._links.values()):
            link.forget(client)

    def pending(self) -> int:
        """Messages in the engine's own clients (standby, retired) or awaiting their spill commit; the
        caller's own clients are not counted (their owner counts them)."""
        links = list(self._links.values())
        return len(self.mailbox) + sum(
            link.outstanding(external=False) + (link.queue.uncommitted if link.queue is not None else 0)
            for link in links)

    def flush(self, timeout: float = 30.0, external: bool = False) -> int:
        """Wait until every message is acknowledged or durably spilled; return how many are neither.
        ``external``: also wait for caller-owned clients (polled here when ``autopoll`` is off)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            outstanding = sum(link.outstanding(external) for link in list(self._links.values()))
            if outstanding == 0:
                break
            if not self.options.autopoll:
                self.poll(0.05)
            elif self.mailbox.defer:  # the owner's flush(): its callbacks run here
                self.poll(0.02)
            else:
                time.sleep(0.02)
        for link in list(self._links.values()):
            if link.queue is not None:
                link.queue.wait_committed(max(0.0, deadline - time.monotonic()))
        if self.mailbox.defer:
            self.mailbox.serve()
        return sum(link.outstanding(external) for link in list(self._links.values()))

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until spills are replayed and failback syncs finished (tests, samples, shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = (self.flush(0.5, external=True) or any(link.queue is not None and link.queue.depth
                                           for link in list(self._links.values()))
                    or self._outages.busy or self._failback_due())
            if not busy:
                return True
            time.sleep(0.1)
        return False

    def status(self) -> dict[str, Any]:
        """Routes, cluster health, spill depth, replay and sync progress (part of the client report)."""
        with self._lock:
            links = dict(self._links)
            replayers = dict(self._replayers)
        outages, syncs = self._outages.status()
        return {
            "routes": self._table.status(),
            "clusters": self.health.status(),
            "links": {name: link.status() for name, link in links.items()},
            "spill": {name: link.queue.status() for name, link in links.items() if link.queue is not None},
            "replay": {name: r.status() for name, r in replayers.items()},
            "outages": outages,
            "sync": syncs,
            "forced": dict(self._table.forced),
            "held": [{"primary": p, "topic": t, "held_s": round(time.monotonic() - since, 1)}
                     for (p, t), since in list(self._held.items())],
        }

    def close(self, timeout: float = 10.0) -> None:
        """Flush, stop replay and sync (their progress is on disk), close the spill queues. Every step runs
        even when one before it fails (the first failure is raised at the end)."""
        if self._closed.is_set():
            return
        with self._exit:
            self.flush(timeout)

    def _stop_maintenance(self) -> None:
        self._closed.set()
        self._maint.join(5)

    def _stop_syncs(self) -> None:
        self._closed.set()
        self._outages.stop()

    def _close_replayers(self) -> None:
        with contextlib.ExitStack() as stack:
            for replayer in list(self._replayers.values()):
                stack.callback(replayer.close)

    def _close_links(self) -> None:
        with contextlib.ExitStack() as stack:
            for link in list(self._links.values()):
                if link.queue is not None:
                    stack.callback(link.queue.close)
                stack.callback(link.close, 1.0)

    def _run_close_hooks(self) -> None:
        with contextlib.ExitStack() as stack:
            for hook in self.on_close:
                stack.callback(hook)


