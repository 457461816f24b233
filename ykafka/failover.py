"""Dual-DC routing, spill and failback: the disaster-recovery engine a producer sends through.

Principles (DESIGN.md §4, seed 003): lose no data, writes come first, consumers may pause.

* Primary A takes all writes of a topic (``route.cluster``). With ``route.standby`` B and
  ``route.failover=auto``, writes move to B while A is DOWN and B is UP; ``route.active=standby`` (or
  :meth:`DisasterRecovery.switch`) moves them by hand, whatever the health says.
* When A is back (or the switch is undone), writes return to A at once, and a :class:`SyncJob` copies
  what was written to B during the outage back to A: it consumes B from the offsets recorded before the
  first outage write (or from the sync group's committed offsets), produces to A, and commits on B only
  after A acknowledged. At-least-once; resumable from the committed group and a progress file.
* A cluster with nowhere to go (no standby, or both down) spills to its local disk queue and replays
  when it answers again (:mod:`ykafka.replay`, :mod:`ykafka.spill`).
* Consumers learn about cluster state through :class:`ClusterStateListener` (pause on DOWN, resume on
  UP): register with :func:`add_cluster_listener`.

Known order caveat: per-key order holds on one cluster (spill and replay keep it); across a failover a
key's outage records reach A through the sync job, after A's new writes of that key.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from ykafka.catalog import Scope, ScopeKind, boolean
from ykafka.config import register_option
from ykafka.errors import ClosedError, SpillFullError
from ykafka.events import MESSAGE_ID_HEADER
from ykafka.health import ClusterState, HealthMonitor, HealthPolicy
from ykafka.replay import ClusterLink, DirectSender, Outgoing, Replayer, replay_config
from ykafka.spill import SpillQueue, SpillSlot
from ykafka.tracing import TRACE_HEADER, Tracer, header_text

log = structlog.get_logger(__name__)

SYNC_HEADER = "ykafka.synced.from"
_CONNECTION_PREFIXES = ("bootstrap.servers", "metadata.broker.list", "security.protocol", "sasl.", "ssl.",
                        "client.dns.lookup", "broker.address.family", "socket.connection.setup.timeout.ms",
                        "client.rack")


# --- consumer hook ------------------------------------------------------------------------------------

class ClusterStateListener(Protocol):
    """Told when a cluster goes DOWN or comes back UP (consumers pause / resume its partitions)."""

    def on_cluster_state(self, cluster: str, state: ClusterState) -> None: ...


_listeners: list[ClusterStateListener] = []
_listeners_lock = threading.Lock()
_cluster_states: dict[str, ClusterState] = {}


def add_cluster_listener(listener: ClusterStateListener) -> None:
    """Register process-wide; every :class:`DisasterRecovery` in the process reports to it."""
    with _listeners_lock:
        _listeners.append(listener)


def remove_cluster_listener(listener: ClusterStateListener) -> None:
    with _listeners_lock, contextlib.suppress(ValueError):
        _listeners.remove(listener)


def cluster_states() -> dict[str, ClusterState]:
    """The last state reported for each cluster in this process."""
    return dict(_cluster_states)


def _broadcast(cluster: str, state: ClusterState) -> None:
    _cluster_states[cluster] = state
    with _listeners_lock:
        listeners = list(_listeners)
    for listener in listeners:
        try:
            listener.on_cluster_state(cluster, state)
        except Exception:
            log.exception("cluster.listener_failed", cluster=cluster, state=state.value)


# --- routes -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RouteSpec:
    """A topic's dual-DC route, from the catalog keys ``route.*`` and ``spill.enabled``."""

    primary: str
    standby: str | None = None
    failover: str = "manual"  # auto | manual
    active: str = "primary"  # primary | standby (manual switch)
    spill: bool = True

    @classmethod
    def from_effective(cls, primary: str, effective: Mapping[str, Any]) -> RouteSpec:
        standby = effective.get("route.standby")
        return cls(primary, standby if standby and standby != primary else None,
                   str(effective.get("route.failover", "manual")), str(effective.get("route.active", "primary")),
                   bool(effective.get("spill.enabled", True)))


def failover_changes(to: str, cluster: str | None = None, topic: str | None = None,
                     mode: str | None = None) -> list[tuple[Scope, str, str]]:
    """Hot-config changes for ``ykafka admin failover``: move writes of a cluster's (or one topic's)
    traffic to its standby (``to="standby"``) or back (``to="primary"``; starts the failback sync).
    The CLI pushes them through the MetaServer admin API."""
    if to not in ("primary", "standby"):
        raise ValueError("to must be primary or standby")
    if (cluster is None) == (topic is None):
        raise ValueError("give exactly one of cluster or topic")
    scope = Scope(ScopeKind.CLUSTER, cluster) if cluster is not None else Scope(ScopeKind.TOPIC, str(topic))
    changes = [(scope, "route.active", to)]
    if mode is not None:
        if mode not in ("auto", "manual"):
            raise ValueError("mode must be auto or manual")
        changes.append((scope, "route.failover", mode))
    return changes


def admin_failover(admin: Any, to: str, cluster: str | None = None, topic: str | None = None,
                   mode: str | None = None, dry_run: bool = False) -> dict[str, Any]:
    """``ykafka admin failover``: push :func:`failover_changes` through the MetaServer admin API
    (``admin`` is a :class:`ykafka.admin.client.AdminClient`); every producer of the scope follows."""
    changes = failover_changes(to, cluster=cluster, topic=topic, mode=mode)
    scope = changes[0][0]
    return dict(admin.push_config(str(scope), {name: value for _, name, value in changes}, dry_run=dry_run,
                                  comment=f"failover: writes to {to}"))


def watch_clusters(rdkafka_config: Callable[[str], Mapping[str, Any]], clusters: list[str],
                   policy: Callable[[str], HealthPolicy] | None = None) -> HealthMonitor:
    """Health of ``clusters`` for a process without a producer (a consumer): its transitions reach every
    :class:`ClusterStateListener`. Close the returned monitor when done."""
    monitor = HealthMonitor(lambda cluster: connection_only(rdkafka_config(cluster)), policy)
    monitor.add_listener(_broadcast)
    for cluster in clusters:
        monitor.cluster(cluster)
    return monitor


# --- outages and the failback sync --------------------------------------------------------------------

@dataclass
class Outage:
    """Writes of ``topic`` moved from ``primary`` to ``standby``; persisted until the sync finished."""

    primary: str
    standby: str
    topic: str
    started: float
    start_offsets: dict[str, int] | None = None  # partition -> standby offset before the first outage write
    ended: float | None = None
    synced: int = 0

    @property
    def group(self) -> str:
        return f"ykafka-failback.{self.primary}.{self.topic}"


class OutageStore:
    """One JSON progress file per (primary, topic) outage under ``<dir>``, written atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def _path(self, primary: str, topic: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", f"{primary}__{topic}")
        return self.directory / f"{safe}.json"

    def save(self, outage: Outage) -> None:
        path = self._path(outage.primary, outage.topic)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(outage)))
        os.replace(tmp, path)

    def delete(self, outage: Outage) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(outage.primary, outage.topic).unlink()

    def load_all(self) -> list[Outage]:
        out: list[Outage] = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                out.append(Outage(**json.loads(path.read_text())))
            except (OSError, ValueError, TypeError) as exc:
                log.warning("failback.bad_progress_file", path=str(path), error=str(exc))
        return out


def connection_only(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The connection / security part of a librdkafka config (for consumers and admin clients)."""
    return {k: v for k, v in conf.items() if isinstance(k, str) and k.startswith(_CONNECTION_PREFIXES)}


class SyncJob:
    """Copy a topic's outage writes from the standby back to the primary, then finish.

    Consumes the standby in the group ``ykafka-failback.<primary>.<topic>`` (so several processes share
    the work, and a restart resumes from the committed offsets), produces every record to the primary with
    its key, value, headers and timestamp (plus a ``ykafka.synced.from`` header), and commits a batch on
    the standby only after the primary acknowledged all of it. Done when every partition is read up to its
    end, the standby has nothing in flight for us, and nothing new arrived for ``idle_s``.
    """

    def __init__(self, outage: Outage, standby_conf: Mapping[str, Any], primary_conf: Mapping[str, Any],
                 standby_idle: Callable[[], bool], on_done: Callable[[SyncJob], None],
                 idle_s: float = 2.0, batch: int = 2000, progress_interval_s: float = 5.0) -> None:
        self.outage = outage
        self._standby_conf = dict(standby_conf)
        self._primary_conf = dict(primary_conf)
        self._standby_idle = standby_idle
        self._on_done = on_done
        self.idle_s = idle_s
        self.batch = batch
        self.progress_interval_s = progress_interval_s
        self.state = "starting"
        self.copied = 0
        self.left: int | None = None
        self.error: str | None = None
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"ykafka-failback-{outage.primary}-{outage.topic}")
        self._thread.start()

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                self._copy()
                if self.state == "done":
                    self._on_done(self)
                return
            except Exception as exc:
                attempt += 1
                self.error = str(exc)[:300]
                self.state = "retrying"
                log.warning("failback.sync_retry", topic=self.outage.topic, primary=self.outage.primary,
                            error=self.error, attempt=attempt)
                self._stop.wait(min(30.0, 1.0 * attempt))

    def _copy(self) -> None:
        o = self.outage
        conf = connection_only(self._standby_conf)
        conf.update({"group.id": o.group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "fetch.wait.max.ms": 100, "enable.partition.eof": False,
                     "isolation.level": "read_uncommitted", "log_level": 3})
        pconf = {k: v for k, v in self._primary_conf.items() if k not in ("on_delivery", "error_cb")}
        pconf.update({"enable.idempotence": True, "acks": "all", "message.timeout.ms": 30_000,
                      "partitioner": "murmur2_random"})
        consumer = Consumer(conf)
        producer = Producer(pconf)
        assigned: list[TopicPartition] = []
        start_offsets = o.start_offsets or {}

        def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
            committed = c.committed(parts, timeout=10)
            for tp, cp in zip(parts, committed, strict=True):
                if cp.offset >= 0:
                    tp.offset = cp.offset
                else:
                    tp.offset = start_offsets.get(str(tp.partition), -2)  # -2: beginning
            assigned[:] = parts
            c.assign(parts)

        consumer.subscribe([o.topic], on_assign=on_assign)
        self.state = "running"
        log.info("failback.sync_start", topic=o.topic, source=o.standby, target=o.primary, group=o.group)
        primary_partitions: int | None = None
        last_data = time.monotonic()
        last_log = time.monotonic()
        failures: list[str] = []
        try:
            while not self._stop.is_set():
                msgs = consumer.consume(self.batch, 0.5)
                good = [m for m in msgs if m.error() is None]
                for m in msgs:
                    err = m.error()
                    if err is not None and err.code() != KafkaError._PARTITION_EOF:
                        log.warning("failback.consume_error", topic=o.topic, error=err.str())
                if good:
                    if primary_partitions is None:
                        primary_partitions = self._partitions(producer, o.topic)
                    self._forward(producer, good, primary_partitions, failures)
                    if failures:
                        raise RuntimeError(f"primary refused synced records: {failures[0]}")
                    offsets: dict[int, int] = {}
                    for m in good:
                        part, off = int(m.partition() or 0), int(m.offset() or 0)
                        offsets[part] = max(offsets.get(part, -1), off + 1)
                    consumer.commit(offsets=[TopicPartition(o.topic, p, off) for p, off in offsets.items()],
                                    asynchronous=False)
                    self.copied += len(good)
                    o.synced += len(good)
                    last_data = time.monotonic()
                if time.monotonic() - last_log >= self.progress_interval_s:
                    self._progress(consumer, assigned)
                    last_log = time.monotonic()
                if assigned and time.monotonic() - last_data >= self.idle_s and self._standby_idle():
                    self.left = self._lag(consumer, assigned)
                    if self.left == 0:
                        self.state = "done"
                        break
        finally:
            producer.flush(10)
            with contextlib.suppress(Exception):
                consumer.close()
        elapsed = max(1e-6, time.monotonic() - self.started)
        log.info("failback.sync_done", topic=o.topic, source=o.standby, target=o.primary, copied=self.copied,
                 rate=round(self.copied / elapsed), state=self.state)

    @staticmethod
    def _partitions(producer: Producer, topic: str) -> int:
        meta = producer.list_topics(topic, timeout=10)
        info = meta.topics.get(topic)
        return len(info.partitions) if info is not None and info.error is None else 0

    def _forward(self, producer: Producer, msgs: list[Message], partitions: int, failures: list[str]) -> None:
        pending = [len(msgs)]

        def delivered(err: KafkaError | None, _m: Message) -> None:
            pending[0] -= 1
            if err is not None:
                failures.append(err.str())

        for m in msgs:
            headers = list(m.headers() or [])
            headers.append((SYNC_HEADER, self.outage.standby.encode()))
            kwargs: dict[str, Any] = {"value": m.value(), "key": m.key(), "headers": headers,
                                      "on_delivery": delivered}
            ts_type, ts = m.timestamp()
            if ts_type and ts > 0:
                kwargs["timestamp"] = ts
            part = int(m.partition() or 0)
            if 0 <= part < partitions:  # same partition as on the standby; re-hashed by key if it has fewer
                kwargs["partition"] = part
            while True:
                try:
                    producer.produce(self.outage.topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
        deadline = time.monotonic() + 60
        while pending[0] > 0 and time.monotonic() < deadline and not failures:
            producer.poll(0.05)
        if pending[0] > 0 and not failures:
            failures.append(f"{pending[0]} records not acknowledged by {self.outage.primary} within 60s")

    def _lag(self, consumer: Consumer, assigned: list[TopicPartition]) -> int:
        positions = consumer.position(assigned)
        lag = 0
        for tp in positions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=5,
                                                        cached=False)
            position = tp.offset if tp.offset >= 0 else 0
            lag += max(0, high - position)
        return lag

    def _progress(self, consumer: Consumer, assigned: list[TopicPartition]) -> None:
        with contextlib.suppress(KafkaException):
            self.left = self._lag(consumer, assigned) if assigned else None
        elapsed = max(1e-6, time.monotonic() - self.started)
        log.info("failback.sync_progress", topic=self.outage.topic, target=self.outage.primary,
                 done=self.copied, left=self.left, rate=round(self.copied / elapsed))

    def status(self) -> dict[str, Any]:
        elapsed = max(1e-6, time.monotonic() - self.started)
        return {"topic": self.outage.topic, "from": self.outage.standby, "to": self.outage.primary,
                "state": self.state, "copied": self.copied, "left": self.left,
                "rate": round(self.copied / elapsed), "error": self.error}

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def cancel(self) -> None:
        """Stop without waiting (the primary failed again); committed progress is kept."""
        self.state = "cancelled"
        self._stop.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)


# --- the engine ---------------------------------------------------------------------------------------

@dataclass
class DrOptions:
    """Local settings of the engine (``ykafka.spill.*`` options and a few knobs for tests)."""

    spill_dir: Path
    spill_max_bytes: int = 1 << 30
    spill_commit: str = "sync"
    spill_fsync: bool = False
    spill_async_max_pending: int = 100_000
    autopoll: bool = True
    sync_idle_s: float = 2.0
    replay_stall_s: float = 15.0
    progress_interval_s: float = 5.0
    extra_client_conf: dict[str, Any] = field(default_factory=dict)


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
                 client_factory: Callable[[str, dict[str, Any]], Producer] | None = None) -> None:
        self._rdkafka_config = rdkafka_config
        self._route = route
        self.options = options
        self._spill_after_ms = spill_after_ms or (lambda _c: 10_000)
        self._client_factory = client_factory or (lambda _cluster, conf: Producer(conf))
        self.health = HealthMonitor(self._health_conf, health_policy)
        self.health.add_listener(self._on_health)
        self._lock = threading.RLock()
        self._links: dict[str, ClusterLink] = {}
        self._replayers: dict[str, Replayer] = {}
        self._routes: dict[str, tuple[RouteSpec, str]] = {}  # topic -> (spec, current target) for status
        self._outages: dict[tuple[str, str], Outage] = {}
        self._outage_locks: dict[tuple[str, str], threading.Lock] = {}
        self._syncs: dict[tuple[str, str], SyncJob] = {}
        self._finished_syncs: list[dict[str, Any]] = []
        self._forced: dict[str, str] = {}  # primary -> "primary" | "standby" (in-process admin switch)
        self._store = OutageStore(options.spill_dir / "failback")
        self._closed = threading.Event()
        self.on_link_available: Callable[[str], None] | None = None  # the owner rebuilds its clients
        self.on_change: list[Callable[[], None]] = []  # routes / link states moved: drop cached direct sends
        # message trace of spill steps: trace_step(kind, cluster, topic, key, headers, delivered message or None)
        self.trace_step: Callable[[str, str, str, Any, Any, Message | None], None] | None = None
        self.epoch = 0  # bumped with every change: a direct path computed before one is stale
        self.on_close: list[Callable[[], None]] = []
        for outage in self._store.load_all():
            self._outages[(outage.primary, outage.topic)] = outage
        for sub in sorted(p.name for p in options.spill_dir.iterdir() if p.is_dir() and p.name != "failback"):
            try:
                self.link(sub)  # open leftover spill queues so they replay
            except Exception as exc:
                log.warning("spill.leftover_skipped", cluster=sub, error=str(exc))
        self._maint = threading.Thread(target=self._maintain, name="ykafka-dr", daemon=True)
        self._maint.start()

    # --- clients ----------------------------------------------------------------------------------

    def _health_conf(self, cluster: str) -> dict[str, Any]:
        return connection_only(self._rdkafka_config(cluster))

    def _direct_conf(self, cluster: str) -> dict[str, Any]:
        conf = dict(self._rdkafka_config(cluster))
        conf.setdefault("reconnect.backoff.max.ms", 1000)
        conf.update(self.options.extra_client_conf)
        conf["message.timeout.ms"] = int(self._spill_after_ms(cluster))
        conf["error_cb"] = self.health.error_cb(cluster, conf.get("error_cb"))
        return conf

    def link(self, cluster: str) -> ClusterLink:
        found = self._links.get(cluster)
        if found is not None:
            return found
        with self._lock:
            link = self._links.get(cluster)
            if link is not None:
                return link
            health = self.health.cluster(cluster)
            queue = SpillQueue(self.options.spill_dir, cluster, max_bytes=self.options.spill_max_bytes,
                               commit="async" if self.options.spill_commit == "async" else "sync",
                               fsync=self.options.spill_fsync,
                               async_max_pending=self.options.spill_async_max_pending)
            link = ClusterLink(cluster, lambda: self._client_factory(cluster, self._direct_conf(cluster)), health,
                               queue, self._reroute, lambda topic: self._route(topic).spill)
            link.on_available = self._link_available
            link.on_change = self._changed
            link.on_spilled = lambda msg: self._trace("spilled", cluster, msg.topic, msg.key, msg.headers, None)
            self._links[cluster] = link

            def replay_client() -> Producer:
                conf = replay_config(self._rdkafka_config(cluster))
                conf["error_cb"] = self.health.error_cb(cluster)
                return self._client_factory(cluster, conf)

            replayer = self._replayers[cluster] = Replayer(
                queue, replay_client, lambda: self.health.is_up(cluster), stall_s=self.options.replay_stall_s,
                progress_interval_s=self.options.progress_interval_s)
            replayer.on_replayed = lambda rec, m: self._trace("replayed", cluster, rec.topic, rec.key, rec.headers, m)
            if queue.depth:
                self._replayers[cluster].kick()
            return link

    def suspect_all(self, reason: str) -> None:
        """A client error that names no cluster: probe every cluster now."""
        for name in list(self.health.status()):
            self.health.cluster(name).suspect(reason)

    def client_error(self, err: KafkaError) -> None:
        """Feed an ``error_cb`` error of a client the engine does not own (it may not say which cluster)."""
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self.suspect_all(err.name())

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
        for listener in list(self.on_change):
            try:
                listener()
            except Exception:
                log.exception("failover.change_listener_failed")

    # --- routing ----------------------------------------------------------------------------------

    def direct(self, topic: str, cluster: str, client: Producer) -> DirectSender | None:
        """The healthy-cluster fast path: a :class:`DirectSender` when ``topic``'s writes go to ``cluster`` now
        and may go straight through the caller's ``client`` (see :meth:`ClusterLink.direct_sender`), else
        None. Valid until an :attr:`on_change` listener fires; a caller re-checks a None within seconds."""
        if self.target(topic) != cluster or (self._route(topic).primary, topic) in self._outages:
            return None
        return self.link(cluster).direct_sender(topic, client)


    def _wants_standby(self, spec: RouteSpec) -> bool:
        if spec.standby is None:
            return False
        forced = self._forced.get(spec.primary)
        if forced is not None:
            return forced == "standby"
        if spec.active == "standby":
            return True
        if spec.failover != "auto":
            return False
        return not self.health.is_up(spec.primary) and self.health.is_up(spec.standby)

    def target(self, topic: str) -> str:
        """The cluster that takes the next write of ``topic``."""
        spec = self._route(topic)
        if spec.standby is None:
            cluster = spec.primary
            if not self._outages:  # the common case: one cluster, nothing to sync back
                previous = self._routes.get(topic)
                if previous is None or previous[0] is not spec:
                    self._routes[topic] = (spec, cluster)
                return cluster
        else:
            cluster = spec.standby if self._wants_standby(spec) else spec.primary
        previous = self._routes.get(topic)
        if previous is None or previous[1] != cluster or previous[0] is not spec:
            self._routes[topic] = (spec, cluster)
            if previous is not None and previous[1] != cluster:
                log.warning("route.switch", topic=topic, source=previous[1], target=cluster)
        if cluster != spec.primary:
            self._begin_outage(spec, topic)
        elif (spec.primary, topic) in self._outages:
            self._end_outage(spec.primary, topic)
        return cluster

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: Callable[[Any, Any], Any] | None = None, timestamp: int = 0, headers: Any = None,
                spill_wait: bool | None = None, client: Producer | None = None,
                client_cluster: str | None = None) -> None:
        """Send one message: to the topic's active cluster, or durably into its spill queue.

        ``client`` / ``client_cluster``: the caller's own librdkafka producer for that cluster, used when
        the message goes there directly (the ykafka Producer passes its hot-configured client)."""
        msg = tuple.__new__(Outgoing, (topic, value, key, -1 if partition is None else partition, timestamp or 0,
                                       headers, on_delivery))
        cluster = self.target(topic)
        self.link(cluster).send(msg, spill_wait, client if client_cluster == cluster else None)

    def _reroute(self, failed_cluster: str, msg: Outgoing, err: KafkaError) -> None:
        """A message came back from ``failed_cluster`` undelivered: send it where the route now says,
        or spill it (asynchronously: it only ever lived in memory), or report it failed."""
        spec = self._route(msg.topic)
        cluster = self.target(msg.topic)
        link = self.link(cluster)
        try:
            if cluster != failed_cluster:
                link.send(msg, spill_wait=False)  # the standby (it spills there if it must)
                return
            if spec.spill and link.queue is not None:
                link.spill(msg, wait=False)
                return
        except (SpillFullError, ClosedError) as exc:  # no caller to raise to: report it, loudly
            log.error("spill.rejected", topic=msg.topic, cluster=cluster, error=str(exc))
            err = KafkaError(KafkaError._QUEUE_FULL, f"undeliverable and not spilled: {exc}")
        if msg.on_delivery is not None:
            msg.on_delivery(err, None)

    # --- outages ----------------------------------------------------------------------------------

    def _begin_outage(self, spec: RouteSpec, topic: str) -> None:
        assert spec.standby is not None
        key = (spec.primary, topic)
        if key in self._outages and self._outages[key].ended is None:
            return
        with self._lock:
            lock = self._outage_locks.setdefault(key, threading.Lock())
        with lock:  # the first outage write of the topic waits until the start offsets are recorded
            existing = self._outages.get(key)
            if existing is not None and existing.ended is None:
                return
            if existing is not None:  # a new outage before the last sync finished: keep its offsets
                job = self._syncs.pop(key, None)
                if job is not None:
                    job.cancel()  # it commits only what the primary acknowledged; the next sync resumes
                existing.ended = None
                self._store.save(existing)
                return
            outage = Outage(spec.primary, spec.standby, topic, time.time(),
                            self._end_offsets(spec.standby, topic))
            self._store.save(outage)
            self._outages[key] = outage
            log.warning("failover.begin", topic=topic, primary=spec.primary, standby=spec.standby,
                        start_offsets=outage.start_offsets)

    def _end_offsets(self, cluster: str, topic: str) -> dict[str, int] | None:
        conf = connection_only(self._rdkafka_config(cluster))
        conf.update({"group.id": "ykafka-failover-probe", "enable.auto.commit": False, "log_level": 0})
        consumer = Consumer(conf)
        try:
            meta = consumer.list_topics(timeout=2)
            info = meta.topics.get(topic)
            if info is None or info.error is not None:
                return {}
            return {str(p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=2)[1]
                    for p in info.partitions}
        except KafkaException as exc:
            log.warning("failover.offsets_unknown", topic=topic, cluster=cluster, error=str(exc))
            return None  # unknown: the sync starts from the beginning (duplicates, never loss)
        finally:
            consumer.close()

    def _end_outage(self, primary: str, topic: str) -> None:
        with self._lock:
            outage = self._outages.get((primary, topic))
            if outage is None or (primary, topic) in self._syncs:
                return
            if outage.ended is None:
                outage.ended = time.time()
                self._store.save(outage)
                log.warning("failover.end", topic=topic, primary=primary, standby=outage.standby)
            if not self.health.is_up(outage.standby):
                return  # the maintenance loop retries once the standby answers
            standby_link = self.link(outage.standby)
            self._syncs[(primary, topic)] = SyncJob(
                outage, self._rdkafka_config(outage.standby), self._rdkafka_config(primary),
                lambda: standby_link.outstanding() == 0, self._sync_done, idle_s=self.options.sync_idle_s,
                progress_interval_s=self.options.progress_interval_s)

    def _sync_done(self, job: SyncJob) -> None:
        key = (job.outage.primary, job.outage.topic)
        with self._lock:
            self._syncs.pop(key, None)
            current = self._outages.get(key)
            if current is job.outage and current.ended is not None:
                self._outages.pop(key, None)
                self._store.delete(current)
            self._finished_syncs = (self._finished_syncs + [job.status()])[-20:]

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
        _broadcast(cluster, state)
        self._check_outages()

    def _check_outages(self) -> None:
        for (primary, topic), outage in list(self._outages.items()):
            if (primary, topic) in self._syncs:
                continue
            spec = self._route(topic)
            if spec.primary == primary and not self._wants_standby(spec):
                self._end_outage(primary, topic)
            elif outage.ended is not None and spec.primary != primary:
                log.warning("failback.route_changed", topic=topic, primary=primary, now=spec.primary)

    def _maintain(self) -> None:
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
            if time.monotonic() - last_check > 1.0:
                last_check = time.monotonic()
                try:
                    self._check_outages()
                except Exception:
                    log.exception("failover.maintenance_error")

    # --- operator API -----------------------------------------------------------------------------

    def switch(self, primary: str, to: str | None) -> None:
        """In-process manual switch of every topic whose primary is ``primary``: ``standby``, ``primary``
        (failback: starts the sync), or None (follow hot config and health again)."""
        if to is None:
            self._forced.pop(primary, None)
        elif to in ("primary", "standby"):
            self._forced[primary] = to
        else:
            raise ValueError("to must be primary, standby or None")
        log.warning("failover.switch", primary=primary, to=to)
        self._check_outages()
        self._changed()

    def poll(self, timeout: float = 0.0) -> int:
        links = list(self._links.values())
        served = sum(link.poll(0) for link in links)
        if not served and timeout:
            time.sleep(timeout)
        return served

    def pending(self) -> int:
        """Messages in the engine's own clients (standby, retired) or awaiting their spill commit; the
        caller's own clients are not counted (their owner counts them)."""
        links = list(self._links.values())
        return sum(link.outstanding(external=False) + (link.queue.uncommitted if link.queue is not None else 0)
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
            else:
                time.sleep(0.02)
        for link in list(self._links.values()):
            if link.queue is not None:
                link.queue.wait_committed(max(0.0, deadline - time.monotonic()))
        return sum(link.outstanding(external) for link in list(self._links.values()))

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until spills are replayed and failback syncs finished (tests, samples, shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = (self.flush(0.5, external=True) or any(link.queue is not None and link.queue.depth
                                           for link in list(self._links.values()))
                    or self._syncs or any(o.ended is not None for o in self._outages.values()))
            if not busy:
                return True
            time.sleep(0.1)
        return False

    def status(self) -> dict[str, Any]:
        """Routes, cluster health, spill depth, replay and sync progress (part of the client report)."""
        with self._lock:
            links = dict(self._links)
            replayers = dict(self._replayers)
            syncs = list(self._syncs.values())
            outages = list(self._outages.values())
        return {
            "routes": {topic: {"primary": spec.primary, "standby": spec.standby, "failover": spec.failover,
                               "active": target, "failed_over": target != spec.primary}
                       for topic, (spec, target) in list(self._routes.items())},
            "clusters": self.health.status(),
            "links": {name: link.status() for name, link in links.items()},
            "spill": {name: link.queue.status() for name, link in links.items() if link.queue is not None},
            "replay": {name: r.status() for name, r in replayers.items()},
            "outages": [{"primary": o.primary, "standby": o.standby, "topic": o.topic, "started": o.started,
                         "ended": o.ended, "synced": o.synced} for o in outages],
            "sync": [job.status() for job in syncs] + list(self._finished_syncs),
            "forced": dict(self._forced),
        }

    def close(self, timeout: float = 10.0) -> None:
        """Flush, stop replay and sync (their progress is on disk), close the spill queues."""
        if self._closed.is_set():
            return
        self.flush(timeout)
        self._closed.set()
        self._maint.join(5)
        for job in list(self._syncs.values()):
            job.stop()
        for replayer in list(self._replayers.values()):
            replayer.close()
        for link in list(self._links.values()):
            link.close(1.0)
            if link.queue is not None:
                link.queue.close()
        self.health.close()
        for hook in self.on_close:
            hook()


# --- wiring into ykafka.Producer -------------------------------------------------------------------------

register_option("ykafka.dr.enabled", boolean, True,
                "route sends through the disaster-recovery engine (spill, replay, dual-DC failover)", None)


def options_from(local: Mapping[str, Any], cache_dir: Path, **overrides: Any) -> DrOptions:
    """DrOptions from ``ykafka.spill.*`` local options."""
    from ykafka.spill import spill_dir

    return DrOptions(spill_dir=spill_dir(local, cache_dir),
                     spill_max_bytes=int(local.get("ykafka.spill.max.bytes", 1 << 30)),
                     spill_commit=str(local.get("ykafka.spill.commit", "sync")),
                     spill_fsync=bool(local.get("ykafka.spill.fsync", False)),
                     spill_async_max_pending=int(local.get("ykafka.spill.async.max.pending", 100_000)),
                     **overrides)


def attach(producer: Any, **overrides: Any) -> DisasterRecovery:
    """Route every send of a :class:`ykafka.Producer` through a DisasterRecovery engine (its send hook).

    Direct sends still use the Producer's own hot-configured client for the cluster; the engine adds
    spill, replay, standby routing and the failback sync, with its own clients for the standby and for
    replay. The spill directory is ``<ykafka.spill.dir>/<client id>`` so two producers never share one.
    """
    from ykafka import catalog

    existing = getattr(producer, "disaster_recovery", None)
    if existing is not None:  # the Producer attached itself (ykafka.dr.enabled): one engine per producer
        return existing
    rt = producer.runtime
    local = rt.conf.options
    opts = options_from(local, rt.conf.cache_dir, **overrides)
    slot: SpillSlot | None = None
    if local.get("ykafka.client.id"):  # a stable identity: its own directory
        opts.spill_dir = opts.spill_dir / re.sub(r"[^A-Za-z0-9._-]", "_", str(local["ykafka.client.id"]))
        opts.spill_dir.mkdir(parents=True, exist_ok=True)
    else:  # the first free slot of the app: a restarted process finds what its predecessor left
        slot = SpillSlot(opts.spill_dir / re.sub(r"[^A-Za-z0-9._-]", "_", rt.app_id))
        opts.spill_dir = slot.path
    specs: dict[str, tuple[int, RouteSpec]] = {}

    def route(topic: str) -> RouteSpec:
        cached = specs.get(topic)
        version = rt.version
        if cached is not None and cached[0] == version:
            return cached[1]
        primary = rt.route(topic=topic)
        effective = dict(rt.effective(topic=topic, cluster=primary))
        if not effective.get("route.standby"):  # hot config first, then the cluster registry's standby
            with contextlib.suppress(Exception):
                effective["route.standby"] = rt.cluster(primary).standby
        spec = RouteSpec.from_effective(primary, effective)
        specs[topic] = (version, spec)
        return spec

    def rdkafka_config(cluster: str) -> dict[str, Any]:
        props = catalog.rdkafka_properties(rt.effective(cluster=cluster), "producer.")
        conf = rt.rdkafka_config(cluster, props)
        for name in ("on_delivery", "delivery.report.callback", "dr_cb", "dr_msg_cb", "error_cb", "stats_cb"):
            conf.pop(name, None)
        conf["partitioner"] = "murmur2_random"  # the Producer's keyed partitioning (Java-compatible)
        return conf

    engine = DisasterRecovery(
        rdkafka_config, route, opts,
        spill_after_ms=lambda cluster: int(rt.effective(cluster=cluster)["spill.after.ms"]),
        health_policy=lambda cluster: HealthPolicy.from_effective(rt.effective(cluster=cluster)))
    default_dr = getattr(producer, "_default_dr", None)

    def send_hook(_producer: Any, client: Any, topic: str, value: Any, key: Any, partition: int,
                  on_delivery: Any, timestamp: int, headers: Any) -> bool:
        engine.produce(topic, value, key, partition, on_delivery or default_dr, timestamp, headers,
                       client=client.rd, client_cluster=client.cluster)
        return True

    def rebuild(cluster: str) -> None:
        reason = "cluster recovered: fresh client (idempotence state)"
        retire = getattr(producer, "retire_clients", None)
        if retire is not None:
            retire(cluster, reason)
            return
        with producer._lock:  # until the Producer exposes retire_clients: its own retire, per client
            for client in list(producer._clients.values()):
                if client.cluster == cluster:
                    producer._retire(client, reason)

    engine.on_link_available = rebuild
    rates: dict[str, tuple[int, float]] = {}

    def trace_step(kind: str, cluster: str, topic: str, key: Any, headers: Any, m: Message | None) -> None:
        """A spill step of a message the Producer traced: it carries a ykafka-trace id, a ykafka-id sampled
        by hash, or (rate 1.0) nothing, and is then found by its key and, once replayed, its coordinates."""
        tracer = producer._obs.tracer()
        if not tracer.active:
            return
        cached = rates.get(topic)
        if cached is None or cached[0] != rt.version:
            cached = rates[topic] = (rt.version, Tracer.rate(rt.effective(topic=topic, cluster=rt.route(topic=topic))))
        rate = cached[1]
        if not rate:
            return
        mid = header_text(headers, TRACE_HEADER)
        if mid is None:
            stamped = header_text(headers, MESSAGE_ID_HEADER)
            if stamped is not None:
                if not Tracer.sampled(stamped, rate):
                    return
                mid = stamped
            elif rate < 1.0:
                return  # not sampled when produced (it would carry a ykafka-trace header)
        tracer.emit(kind, topic=topic, key=key, msg_id=mid, cluster=cluster,
                    partition=None if m is None else m.partition(), offset=None if m is None else m.offset(),
                    detail="disk spill" if m is None else "replayed from the disk spill")

    engine.trace_step = trace_step
    if slot is not None:
        engine.on_close.append(slot.release)
    if not getattr(producer, "feeds_client_errors", False):  # chain into the Producer's error_cb
        user_error_cb = producer._user_error_cb

        def chained(err: Any) -> None:  # the Producer's error_cb is shared by its clients: probe them all
            engine.client_error(err)
            if user_error_cb is not None:
                user_error_cb(err)

        producer._user_error_cb = chained
    producer.set_hooks(send=send_hook)
    return engine
