"""Resolving a topic: ACL, route, effective settings, its librdkafka client, partition picker, throttle and
disaster-recovery path, cached per config version as a :class:`~ykafka.producer.state._TopicState`."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import Any

import structlog

from ykafka import catalog
from ykafka.catalog import Scope, ScopeKind
from ykafka.errors import ConfigError
from ykafka.lifecycle import weak_method
from ykafka.partitioner import Picker, needs_python
from ykafka.producer import chain
from ykafka.producer.state import (
    _CALLBACKS,
    _DR_RECHECK_S,
    ProducerBase,
    _Client,
    _freeze,
    _TopicState,
)
from ykafka.tracing import Tracer
from ykafka.transport import (
    KafkaException,
    ProducerIdHastener,
    from_kafka_error,
    new_producer,
)
from ykafka.transport import RawProducer as _RdProducer

log = structlog.get_logger(__name__)




class TopicResolver(ProducerBase):
    """Topic resolution and client building (mixed into :class:`ykafka.producer.core.Producer`)."""

    # --- resolving a topic -------------------------------------------------------------------------

    def _on_version(self, version: int) -> None:
        self._states.clear()

    def _prepare(self, topic: str) -> _TopicState:
        """Resolve ``topic`` and cache the result. The network and disk work (grant check, namespaces, the DR
        link's spill queue, the partition count) runs outside the producer's lock; only choosing the client
        (and holding the topic when it moves) and installing the state run under it. A state resolved while
        the config, the DR routes, the client or the topic's hold changed is used once and not cached."""
        rt = self._runtime
        rt.check_acl("produce", topic)
        rt.subscribe(topic=topic)
        version = rt.version
        cluster = rt.route(topic=topic)
        rt.subscribe(cluster=cluster)
        effective = rt.effective(topic=topic, cluster=cluster)
        props = self._client_props(cluster, effective)
        key = (cluster, _freeze(props))
        if key not in self._clients and self._dr is not None:
            # open the cluster's disaster-recovery link (its spill queue on disk: ~35 ms) BEFORE the librdkafka
            # handle, so the first message follows the handle within a millisecond: an idempotent handle only
            # connects to the partition leader before its first producer-id tick (500 ms) when a message
            # arrives before the bootstrap metadata does; later, the first ack costs two ticks
            # (docs/benchmarks.md, "Start-up")
            self._dr.open_link(topic, cluster)
        with self._lock:
            client = self._client_for(topic, key, cluster, props)
            held = topic in self._held
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
        dr_epoch = self._dr.epoch if self._dr is not None else 0
        if self._dr is not None and self._delivery_hook is None and picker is None and throttle is None and not held:
            direct = self._dr.direct(topic, cluster, client.rd)
            if direct is None:  # spilling, failed over, draining: through the engine; re-checked soon
                expires = min(expires or float("inf"), time.monotonic() + _DR_RECHECK_S)
        state = _TopicState(topic, client, cluster, effective, picker, throttle, held, expires,
                            Tracer.rate(effective), direct)
        chain.build(self, state)  # every per-message step this topic needs, composed once (chain.py)
        with self._lock:
            if (rt.version == version and not self._closed and self._clients.get(key) is client
                    and (topic in self._held) == held
                    and (self._dr is None or self._dr.epoch == dr_epoch or direct is None)):
                self._states[topic] = state
        return state

    def _client_for(self, topic: str, key: tuple[Any, ...], cluster: str, props: dict[str, Any]) -> _Client:
        """The client ``topic`` sends through now (built when new); a topic that moves to another client is held
        until what it sent on the old one is delivered. Called with the producer's lock held."""
        client = self._clients.get(key)
        if client is None:
            client = self._new_client(key, cluster, props, topic)
        home = self._home.get(topic)
        if home is not None and home is not client and self._held.get(topic) is None:
            # the topic moves to another client (or moves again while its held messages were being released):
            # what it already sent on the old one must be delivered before anything goes to the new one, so it
            # is held (its pending messages stay queued, in order) until that drained
            if home.retiring_since is None:
                self._retire(home, reason=f"topic {topic} moves to {cluster}")
            if home.drained_at is None:
                self._held[topic] = home
                log.info("ykafka.producer.topic_held", topic=topic, old_cluster=home.cluster,
                         new_cluster=cluster, in_queue=len(home.rd))
        if self._held.get(topic) is None:  # not held, or its held messages are being released now
            self._home[topic] = client
        return client

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
        username = props.get("sasl.username")
        error_cb = self._error_cbs.get((cluster, username))
        if error_cb is None:  # one object per cluster and credentials: it is part of the client's key
            # weakly: the client's handle (which the DR engine's threads may reach) must not keep the producer alive.
            # The credentials ride along so a refusal of retired ones (a swapped-out handle still reconnecting
            # with the password the grant replaced) is not taken for a refusal of those in force (issue 37).
            error_cb = self._error_cbs[(cluster, username)] = functools.partial(
                weak_method(self._error_cb), cluster=cluster, username=username)
        props["error_cb"] = error_cb
        self._obs.add_statistics(props)  # statistics -> __ykafka_metrics (beside the application's stats_cb)
        if self._conf.get("ykafka.dr.enabled"):  # not delivered this long while unreachable: spilled
            # ...through the engine's stall watch (no per-message timeout in that window: ykafka.dr.stall)
            stall_ms = max(effective["spill.after.ms"], effective["producer.linger.ms"] + 1000)
            if self._dr is not None:
                self._dr.watch_stalls(props, cluster, stall_ms)
            else:
                props["message.timeout.ms"] = stall_ms
            # a plain producer (acks other than all) pipelining requests stores a batch a broker refused with a
            # retriable error behind the next batch of its partition: per-key order needs one request in flight
            # (docs/disaster-recovery.md, *Guarantees and limits*; the engine's own clients do the same), unless the
            # application set it (either name: ``max.in.flight`` is librdkafka's alias)
            if str(props.get("enable.idempotence", "")).lower() not in ("true", "1") and "max.in.flight" not in props:
                props.setdefault("max.in.flight.requests.per.connection", 1)
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
