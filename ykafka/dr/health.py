"""Cluster health: is a Kafka cluster taking writes right now?

Two sources feed one verdict per cluster. librdkafka tells us about trouble as it happens (``error_cb``
``_ALL_BROKERS_DOWN``, ``_TRANSPORT``; delivery timeouts), and a metadata probe (``list_topics`` with a
short timeout) confirms it and notices recovery. A cluster is marked DOWN after ``health.down.failures``
consecutive failures, or after failing for ``health.down.after.ms`` without a single success in between;
one successful probe or delivery marks it UP again. A probe waits for its answer as long as that many failed
probes would take, and one that gets none counts a failure per probe timeout it waited: a cluster that does not
answer is down as soon as before, and one that answers slowly (a round trip past the probe timeout: a congested
link, a broker in long GC pauses) is not called down while it acknowledges writes. Probes run every
``health.probe.interval.ms`` while a cluster is suspect or down, and ten times less often while it is healthy.

A cluster that refuses the client's credentials (SASL authentication failed: the app was revoked) answers; it
is not down. :meth:`ClusterHealth.refuse` records the refusal instead of a failure, and while it stands the
failures that follow it (the metadata probe, ``_ALL_BROKERS_DOWN``, timeouts) are not counted: the producer's
link fails its messages instead of spilling them (:mod:`ykafka.dr.link`). A delivery, a probe on a fresh
connection, or new credentials (a grant renewal) lift it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog

from ykafka.dr.mailbox import mark_internal
from ykafka.transport import RawAdminClient, RawKafkaError, is_auth_error

log = structlog.get_logger(__name__)


class ClusterState(StrEnum):
    UP = "up"
    DOWN = "down"


StateListener = Callable[[str, ClusterState], None]

#: librdkafka errors that count as a failure of the cluster.
FAILURE_CODES = frozenset({RawKafkaError._ALL_BROKERS_DOWN, RawKafkaError._MSG_TIMED_OUT, RawKafkaError._TIMED_OUT,
                           RawKafkaError._RESOLVE, RawKafkaError.REQUEST_TIMED_OUT})
#: errors that only make the cluster suspect (probe now): a single connection can drop on a healthy cluster.
SUSPECT_CODES = frozenset({RawKafkaError._TRANSPORT, RawKafkaError.NETWORK_EXCEPTION,
                           RawKafkaError.NOT_ENOUGH_REPLICAS, RawKafkaError.NOT_LEADER_FOR_PARTITION,
                           RawKafkaError.LEADER_NOT_AVAILABLE})
#: the cluster refuses the client's credentials: every request fails until they change (see ClusterHealth.refuse)
AUTHENTICATION_CODES = frozenset({RawKafkaError._AUTHENTICATION, RawKafkaError.SASL_AUTHENTICATION_FAILED})


@dataclass
class HealthPolicy:
    down_failures: int = 3
    down_after_s: float = 2.0
    probe_interval_s: float = 0.5
    probe_timeout_s: float = 0.5

    @classmethod
    def from_effective(cls, effective: Mapping[str, Any]) -> HealthPolicy:
        """Build from catalog values (``health.*`` keys, already parsed)."""
        return cls(down_failures=int(effective.get("health.down.failures", 3)),
                   down_after_s=float(effective.get("health.down.after.ms", 2000)) / 1000.0,
                   probe_interval_s=float(effective.get("health.probe.interval.ms", 500)) / 1000.0)


class ClusterHealth:
    """The health of one cluster, with its own probe thread."""

    def __init__(self, cluster: str, rdkafka_config: Mapping[str, Any], policy: HealthPolicy | None = None,
                 on_change: StateListener | None = None, probe: Callable[[float], None] | None = None,
                 conf_source: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self.cluster = cluster
        self.policy = policy or HealthPolicy()
        self._on_change = on_change
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.state = ClusterState.UP
        self.since = time.time()
        self._failures = 0
        self._failing_since: float | None = None
        self._suspect = False
        self.last_error: str | None = None
        self.last_probe_ms: float | None = None
        self.last_success = time.monotonic()  # last probe or delivery that reached the cluster
        self.last_probe_ok = 0.0  # last probe that reached it (fresh evidence, unlike a late ack)
        self.transitions = 0
        #: the broker's refusal of our credentials while it stands (None: not refused), and the settings refused
        self.refused: RawKafkaError | None = None
        self._refused_conf: dict[str, Any] | None = None
        self._refusal_checked = 0.0
        self._refusal_changes = 0  # refusals and lifts so far: a probe that saw one begin or end counts nothing
        self.on_refused: Callable[[], None] | None = None  # the link stops its direct sends
        self._conf_source = conf_source  # current settings (a grant renewal brings new credentials)
        self._admin_conf = probe_settings(rdkafka_config)
        self._admin: RawAdminClient | None = None
        self._per_broker: dict[str, RawAdminClient] = {}  # address -> a client bootstrapped there only
        #: consecutive probe failures, counted as record_failure counts them (the probe client is rebuilt every
        #: PROBE_CLIENT_FAILURES)
        self._probe_failures = 0
        self._probe = probe or self._metadata_probe
        self._thread = threading.Thread(target=self._run, name=f"ykafka-health-{cluster}", daemon=True)
        self._thread.start()

    # --- feeds ------------------------------------------------------------------------------------

    def on_error(self, err: RawKafkaError) -> None:
        """Feed a librdkafka error (from ``error_cb`` or a delivery report)."""
        code = err.code()
        if code in AUTHENTICATION_CODES:
            self.refuse(err)
        elif is_auth_error(err):  # authorization: this topic or group is refused, the cluster answers
            return
        elif code in FAILURE_CODES:
            self.record_failure(err.name())
        elif code in SUSPECT_CODES:
            self.suspect(err.name())

    def suspect(self, reason: str) -> None:
        with self._lock:
            self._suspect = True
            self.last_error = reason
            if self._failing_since is None:
                self._failing_since = time.monotonic()
        self._wake.set()

    def refuse(self, err: RawKafkaError) -> None:
        """The cluster refused the client's credentials: it answers, it is not failing."""
        refused_conf = self._current_conf()
        with self._lock:
            first = self.refused is None
            self.refused = err
            self.last_error = f"{err.name()}: {err.str()}"[:300]
            self._failures = 0
            self._failing_since = None
            self._suspect = False
            self._refused_conf = refused_conf
            self._refusal_checked = time.monotonic()
            self._refusal_changes += 1
        if first:
            log.warning("cluster.refused", cluster=self.cluster, code=err.name(), error=err.str()[:300])
            notify = self.on_refused
            if notify is not None:
                notify()
        self._wake.set()  # probe on a fresh connection soon: a passing refusal is lifted within an interval

    def is_refused(self) -> bool:
        """Whether the refusal stands: lifted when the settings in force are not those refused (new credentials
        from a grant renewal; checked at most twice a second)."""
        if self.refused is None:
            return False
        now = time.monotonic()
        if self._conf_source is not None and now - self._refusal_checked > 0.5:
            self._refusal_checked = now
            if self._current_conf() != self._refused_conf:
                self._lift("new credentials")
        return self.refused is not None

    def _lift(self, reason: str) -> None:
        with self._lock:
            if self.refused is None:
                return
            self.refused = None
            self._refused_conf = None
            self._refusal_changes += 1
        log.info("cluster.refusal_lifted", cluster=self.cluster, reason=reason)

    def _current_conf(self) -> dict[str, Any]:
        if self._conf_source is None:
            return self._admin_conf
        try:
            return probe_settings(self._conf_source())
        except Exception:  # settings not resolvable right now: keep those in force
            log.debug("cluster.settings_unavailable", cluster=self.cluster, exc_info=True)
            return self._admin_conf

    def record_failure(self, reason: str, count: int = 1) -> None:
        """``count``: how many failures this one stands for (a probe that waited several probe timeouts)."""
        if self.refused is not None:  # what follows a refusal (probe, timeouts) is the refusal, not an outage
            with self._lock:
                self.last_error = reason
            return
        with self._lock:
            self._failures += max(1, count)
            self._suspect = True
            self.last_error = reason
            now = time.monotonic()
            if self._failing_since is None:
                self._failing_since = now
            down = self.state is ClusterState.UP and (
                self._failures >= self.policy.down_failures
                or (self.policy.down_after_s > 0 and now - self._failing_since >= self.policy.down_after_s))
        self._wake.set()
        if down:
            self._transition(ClusterState.DOWN, reason)

    def stalled(self, reason: str) -> None:
        """The cluster's link saw nothing delivered for ``spill.after.ms`` (:mod:`ykafka.dr.stall`): what the
        timed-out messages of that window did before the watch replaced librdkafka's per-message timeout, as many
        failures as make the cluster down (a probe that answers brings it back)."""
        self.record_failure(reason, self.policy.down_failures)

    def record_success(self, probe: bool = False) -> None:
        """A probe answered, or a delivery was acknowledged. Only a probe brings a DOWN cluster back: an
        acknowledgement may be old news served after the cluster died."""
        if not probe and not self._failures and not self._suspect and self.state is ClusterState.UP \
                and self.refused is None:
            self.last_success = time.monotonic()  # the hot path: every acknowledgement, nothing to reset
            return
        if self.refused is not None:
            self._lift("probe" if probe else "delivery")
        with self._lock:
            if self.state is ClusterState.DOWN and not probe:
                return
            self.last_success = time.monotonic()
            if probe:
                self.last_probe_ok = self.last_success
            self._failures = 0
            self._failing_since = None
            self._suspect = False
            up = self.state is ClusterState.DOWN
        if up:
            self._transition(ClusterState.UP, "reachable")

    def _transition(self, state: ClusterState, reason: str) -> None:
        with self._lock:
            if self.state is state:
                return
            self.state = state
            self.since = time.time()
            self.transitions += 1
        log.warning("cluster.state", cluster=self.cluster, state=state.value, reason=reason)
        if self._on_change is not None:
            try:
                self._on_change(self.cluster, state)
            except Exception:
                log.exception("cluster.state_listener_failed", cluster=self.cluster)

    def force(self, state: ClusterState, reason: str = "forced") -> None:
        """Set the state by hand (operator command, tests); probes keep running and may change it back."""
        with self._lock:
            self._failures = self.policy.down_failures if state is ClusterState.DOWN else 0
            self._failing_since = time.monotonic() if state is ClusterState.DOWN else None
        self._transition(state, reason)

    # --- probing ----------------------------------------------------------------------------------

    def _metadata_probe(self, timeout: float) -> None:
        conf = self._current_conf()
        if conf != self._admin_conf or self.refused is not None:
            # new credentials; or refused: a connection authenticated before may still pass, a fresh one tells
            self._admin_conf, self._admin, self._per_broker = conf, None, {}
        if self._admin is None:
            self._admin = RawAdminClient(self._admin_conf)
        try:
            self._admin.list_topics(timeout=timeout)
        except Exception:
            if not self._any_broker_answers(min(timeout, self.policy.probe_timeout_s)):
                raise

    def _any_broker_answers(self, timeout: float) -> bool:
        """A cluster of several brokers answers when one of them does. The probe client's request goes to one
        broker, and on a three-node cluster with one node SIGSTOPped (a hung JVM) it went to the frozen one and
        timed out every time while the other two served writes: the cluster was called down and every producer
        of the soak (issue 38, ``--dc-a-nodes 3``) failed over to its standby. So after a failed probe each
        bootstrap address is asked on its own, through a client bootstrapped there only (kept for the next time)."""
        addresses = [a.strip() for a in str(self._admin_conf.get("bootstrap.servers", "")).split(",") if a.strip()]
        if len(addresses) < 2:
            return False
        for address in addresses:
            admin = self._per_broker.get(address)
            if admin is None:
                admin = self._per_broker[address] = RawAdminClient({**self._admin_conf, "bootstrap.servers": address})
            try:
                admin.list_topics(timeout=timeout)
            except Exception:
                continue
            return True
        return False

    def probe_now(self) -> bool:
        """One metadata probe; feeds the verdict and returns whether the cluster answered.

        It waits for the answer as long as ``down_failures`` probe timeouts, and a probe without one counts a
        failure per probe timeout it waited. Before, each probe gave up after one probe timeout (0.5 s) and the
        Producer's direct path does not report its acknowledgements here (nothing per message), so a cluster 350 ms
        away each way was called down three probes later while it acknowledged every write, and its in-flight
        messages were purged and sent again (the soak of 2026-12-01: 677 records stored twice at a 268 ms latency
        fault; tests/test_dr_network.py). A cluster that does not answer at all is down after the same time."""
        started = time.monotonic()
        short = self.policy.probe_timeout_s
        with self._lock:
            refusals_before, refused_before = self._refusal_changes, self.refused is not None
        try:
            self._probe(short * max(1, self.policy.down_failures))
        except Exception as exc:
            waited = time.monotonic() - started
            self.last_probe_ms = waited * 1000
            with self._lock:
                stale = refused_before or self._refusal_changes != refusals_before
            if stale:
                # begun under a refusal, or one began or was lifted while it waited: its silence is the refusal's
                # (the old credentials' connection), not an outage. Counted, a probe begun before the app was
                # enabled again failed 1.5 s after the lift as three failures and called the cluster down
                with self._lock:
                    self.last_error = f"probe: {str(exc)[:200]}"
                return False
            count = max(1, int(waited / short + 0.1)) if short > 0 else 1  # (a timeout returns a hair early)
            self.record_failure(f"probe: {str(exc)[:200]}", count)
            before = self._probe_failures
            self._probe_failures += count
            if before // PROBE_CLIENT_FAILURES != self._probe_failures // PROBE_CLIENT_FAILURES \
                    and self._admin is not None:
                # a fresh client gets fresh connections: in the soak (issue 38) one producer's probe client kept
                # failing for 4 minutes after its cluster was SIGKILLed and restarted, while the other process's
                # probe of the same cluster answered within a second, so its writes never came back from the standby
                log.warning("cluster.probe_client_rebuilt", cluster=self.cluster, failures=self._probe_failures)
                self._admin, self._per_broker = None, {}
            return False
        self._probe_failures = 0
        self.last_probe_ms = (time.monotonic() - started) * 1000
        self.record_success(probe=True)
        return True

    def _run(self) -> None:
        mark_internal()  # its listeners re-route; a user callback reached here waits for the owner's poll()
        while not self._stop.is_set():
            with self._lock:
                urgent = self._suspect or self.state is ClusterState.DOWN or self.refused is not None
            interval = self.policy.probe_interval_s * (1 if urgent else 10)
            if self._wake.wait(interval):
                self._wake.clear()
            if self._stop.is_set():
                return
            self.probe_now()

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"state": self.state.value, "since": self.since, "consecutive_failures": self._failures,
                    "last_error": self.last_error, "last_probe_ms": self.last_probe_ms,
                    "transitions": self.transitions,
                    "refused": None if self.refused is None else f"{self.refused.name()}: {self.refused.str()}"[:300]}

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(5)
        self._admin, self._per_broker = None, {}


#: consecutive failed probes after which the probe's client is replaced by a new one
PROBE_CLIENT_FAILURES = 10

_NOT_FOR_ADMIN = frozenset({"error_cb", "on_delivery", "delivery.report.only.error", "stats_cb",
                            "enable.idempotence", "acks", "linger.ms", "batch.size", "compression.type",
                            "message.timeout.ms", "partitioner", "queue.buffering.max.ms",
                            "queue.buffering.max.messages", "max.in.flight.requests.per.connection",
                            "retries", "client.id"})


def probe_settings(rdkafka_config: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata probe's settings: the connection's (credentials included), short timeouts, no logs."""
    conf = {k: v for k, v in rdkafka_config.items() if k not in _NOT_FOR_ADMIN}
    conf.setdefault("reconnect.backoff.ms", 50)
    conf.setdefault("reconnect.backoff.max.ms", 500)
    conf.setdefault("socket.connection.setup.timeout.ms", 1000)
    conf.setdefault("log_level", 0)
    return conf


class HealthMonitor:
    """Health of every cluster a client writes to; notifies listeners of UP / DOWN transitions."""

    def __init__(self, rdkafka_config: Callable[[str], Mapping[str, Any]],
                 policy: Callable[[str], HealthPolicy] | None = None) -> None:
        self._rdkafka_config = rdkafka_config
        self._policy = policy or (lambda _cluster: HealthPolicy())
        self._clusters: dict[str, ClusterHealth] = {}
        self._listeners: list[StateListener] = []
        self._lock = threading.Lock()

    def cluster(self, name: str) -> ClusterHealth:
        found = self._clusters.get(name)
        if found is not None:
            return found
        with self._lock:
            health = self._clusters.get(name)
            if health is None:
                health = ClusterHealth(name, self._rdkafka_config(name), self._policy(name), self._notify,
                                       conf_source=lambda: self._rdkafka_config(name))
                self._clusters[name] = health
            return health

    def add_listener(self, listener: StateListener) -> None:
        self._listeners.append(listener)

    def _notify(self, cluster: str, state: ClusterState) -> None:
        for listener in list(self._listeners):
            try:
                listener(cluster, state)
            except Exception:
                log.exception("health.listener_failed", cluster=cluster, state=state.value)

    def state(self, cluster: str) -> ClusterState:
        return self.cluster(cluster).state

    def is_up(self, cluster: str) -> bool:
        return self.cluster(cluster).state is ClusterState.UP

    def error_cb(self, cluster: str,
                 chain: Callable[[RawKafkaError], Any] | None = None) -> Callable[[RawKafkaError], None]:
        """An ``error_cb`` for a librdkafka client of ``cluster`` that feeds this monitor (then ``chain``)."""
        health = self.cluster(cluster)

        def on_error(err: RawKafkaError) -> None:
            health.on_error(err)
            if chain is not None:
                chain(err)

        return on_error

    def status(self) -> dict[str, Any]:
        with self._lock:
            clusters = dict(self._clusters)
        return {name: health.status() for name, health in clusters.items()}

    def close(self) -> None:
        with self._lock:
            clusters = list(self._clusters.values())
            self._clusters.clear()
        for health in clusters:
            with contextlib.suppress(Exception):
                health.close()
