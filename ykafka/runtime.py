"""The client core shared by :class:`ykafka.Producer` and :class:`ykafka.Consumer`.

A :class:`Runtime` owns everything that is not Kafka I/O: identity, the MetaServer grant (with its disk
cache and background renewal), the ACL cache, the cluster registry, the hot-config layers fed by the
Apollo long poll, and client reports. Producer / Consumer build their librdkafka clients from what it
resolves and re-resolve when :attr:`Runtime.version` moves.

Start-up (docs/architecture.md, "Data flow"): local config -> authenticate (signed) -> grant -> fetch the
global namespace -> start long poll + renewal -> report. In local mode (no ``ykafka.metaserver``) there is no grant: the
clusters come from ``bootstrap.servers`` (cluster ``default``) and ``ykafka.local.clusters``, everything is
allowed, and hot config is on only if ``ykafka.configcenter.url`` is given.

Stable API for the Producer / Consumer (everything else is internal)::

    rt = Runtime(config.load(conf, "consumer"), group="g1")   # or Runtime.from_conf(conf, "consumer")
    rt.start()                                                # may raise AuthError / MetaServerUnavailable
    rt.check_acl("consume", topic); rt.check_acl("group", "g1")   # AclDenied
    rt.subscribe(topic="t", group="g1")                       # lazy namespaces, bounded sync fetch
    cluster = rt.route(topic="t", group="g1")                 # route.cluster, else the grant's default
    eff = rt.effective(topic="t", group="g1", cluster=cluster)  # typed catalog values, by precedence
    props = rt.rdkafka_config(cluster, catalog.rdkafka_properties(eff, "consumer."))
    rt.version                                                # int; changes when anything above may
    rt.add_version_listener(lambda version: ...)              # e.g. drop cached per-topic state
    rt.add_listener(lambda change: ...)                       # ConfigChange, from the poll thread
    rt.add_grant_listener(lambda grant: ...)                  # grant contents changed
    rt.set_report_provider(lambda: {"topics": [...], "group": "g1", "cluster": "dc-a", "state": "running"})
    rt.record_error({"type": "...", ...})                     # goes into the next client report
    rt.close()
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from cachetools import TTLCache

from ykafka import acl as acl_patterns
from ykafka import catalog, process, transport
from ykafka.apollo import ApolloClient, NamespaceConfig
from ykafka.auth import AclCache, ClusterInfo, Grant, GrantClient, Want
from ykafka.catalog import Scope, ScopeKind
from ykafka.config import LocalConfig, Role
from ykafka.config import load as load_config
from ykafka.endpoints import resolve_meta
from ykafka.errors import AuthError, MetaServerUnavailable, UnknownClusterError
from ykafka.hotconfig import ConfigChange, HotConfig
from ykafka.netutil import local_ip

log = structlog.get_logger(__name__)

ReportProvider = Callable[[], Mapping[str, Any]]
GrantListener = Callable[[Grant], None]


def _error_text(error: Mapping[str, Any]) -> str:
    if error.get("type") == "config_rejected":
        return (f"config_rejected {error.get('namespace')} {error.get('key')}={error.get('value')!r}: "
                f"{error.get('reason')} (release {error.get('release_key')})")
    details = " ".join(f"{k}={v}" for k, v in error.items() if k not in ("type", "at"))
    return f"{error.get('type', 'error')} {details}".strip()


ROUTE_KEYS = ("route.cluster", "route.standby")
PLACEMENT = "placement:"  # a want's namespace naming a topic's placement (metaserver/domain/reach.py)
#: how long a topic's placement (or its absence) is trusted; moving a placed topic is a route.cluster change
PLACEMENT_TTL_S = 300.0
_UNKNOWN = object()  # not in the placement cache (None is a cached "no placement")
_RETRY_AFTER_FAILURE_S = 5.0
#: a cluster a route names but the MetaServer did not confirm is asked for again after this long
WANT_INTERVAL_S = 5.0

#: topics whose effective config a client report carries (the console's client page)
_EFFECTIVE_TOPICS = 20


class Runtime:
    """Identity, grant, ACL, clusters, hot config and reports of one Producer or Consumer."""

    def __init__(self, conf: LocalConfig, group: str | None = None) -> None:
        self.conf = conf
        self.role: Role = conf.role
        self.group = group
        self.client_id = conf.new_client_id()
        self.local_mode = conf.local_mode
        self.app_id: str = conf.app_id or "local"
        self._grant: Grant | None = None
        self._grant_client: GrantClient | None = None
        # clusters beyond the grant that route values in force name: asked for at each renewal (reach.py)
        self._wants: dict[Want, float] = {}
        # read by the senders' threads, the renewal thread and the config poll thread; a TTLCache reorders its
        # links on every read, so every use holds this lock
        self._placements: TTLCache[str, str | None] = TTLCache(maxsize=100_000, ttl=PLACEMENT_TTL_S)
        self._placements_lock = threading.Lock()
        self.acl = AclCache(conf.ms("ykafka.acl.cache.ttl.ms"))
        self.hot = HotConfig(conf.catalog_defaults, prefix=str(conf.get("ykafka.configcenter.namespace.prefix")))
        self.hot.add_validator(self._validate_cluster_names)
        self.apollo: ApolloClient | None = None
        self.ip: str = conf.get("ykafka.client.ip") or local_ip(
            (conf.metaserver or conf.get("ykafka.configcenter.url") or "").split(",")[0] or None)
        self._grant_listeners: list[GrantListener] = []
        self._report_provider: ReportProvider | None = None
        self._errors: deque[dict[str, Any]] = deque(maxlen=50)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()
        self._subscribed: set[str] = set()
        self._started = False
        self.state = "starting"
        self.reports_sent = 0

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any] | None, role: Role, group: str | None = None) -> Runtime:
        return cls(load_config(conf, role), group=group)

    # --- life cycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Authenticate, subscribe the global namespace (and the group's), start background threads."""
        if self._started:
            return
        if not self.local_mode:
            assert self.conf.metaserver and self.conf.app_id and self.conf.app_secret
            if not self.conf.get("ykafka.client.ip"):
                self.ip = local_ip(self.conf.metaserver.split(",")[0])
            self._grant_client = GrantClient(self.conf.metaserver, self.conf.app_id, self.conf.app_secret,
                                             self.client_id, self.ip, self.conf.cache_dir,
                                             self.conf.ms("ykafka.metaserver.timeout.ms"))
            self._set_grant(self._grant_client.obtain(), initial=True)
        self._start_configcenter()
        self._started = True
        self.state = "running"
        self._thread = threading.Thread(target=self._maintain, name="ykafka-runtime", daemon=True)
        self._thread.start()
        log.info("ykafka.client.started", role=self.role, app_id=self.app_id, client_id=self.client_id,
                 local_mode=self.local_mode, clusters=sorted(self.clusters()), ip=self.ip,
                 configcenter=self.apollo.url if self.apollo else None)

    def close(self) -> None:
        """Stop background work; post a last report (best effort)."""
        if self._stop.is_set():
            return
        self.state = "closed"
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._report()
        if self.apollo is not None:
            self.apollo.close()
        if self._grant_client is not None:
            self._grant_client.close()

    # --- grant, clusters, ACL ----------------------------------------------------------------------

    @property
    def grant(self) -> Grant | None:
        return self._grant

    @property
    def version(self) -> int:
        """Moves whenever a resolved value, a route or the grant may have changed."""
        return self.hot.version

    def clusters(self) -> dict[str, ClusterInfo]:
        grant = self._grant
        if grant is not None:
            return dict(grant.clusters)
        return {name: ClusterInfo(name, servers) for name, servers in self.conf.local_clusters().items()}

    @property
    def default_cluster(self) -> str:
        grant = self._grant
        return grant.default_cluster if grant is not None else self.conf.local_default_cluster

    def cluster(self, name: str) -> ClusterInfo:
        found = self.clusters().get(name)
        if found is None:
            raise UnknownClusterError(f"cluster {name!r} is not in the app's grant "
                                      f"(known: {', '.join(sorted(self.clusters())) or 'none'})")
        return found

    def check_acl(self, operation: acl_patterns.Operation, name: str) -> None:
        """Raise :class:`AclDenied` unless the grant allows ``operation`` on ``name`` (local mode: allowed)."""
        self.acl.check(operation, name)

    def allowed(self, operation: acl_patterns.Operation, name: str) -> bool:
        return self.acl.allowed(operation, name)

    def rdkafka_config(self, cluster: str, role_props: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """librdkafka settings for a client on ``cluster``: local pass-through < cluster < role props."""
        props = {k: v for k, v in self.conf.rdkafka.items()
                 if k not in ("bootstrap.servers", "metadata.broker.list")}
        props.update(self.cluster(cluster).rdkafka())
        props.setdefault("client.id", self.app_id)
        props.update(role_props or {})
        return props

    def add_grant_listener(self, listener: GrantListener) -> None:
        self._grant_listeners.append(listener)

    def _set_grant(self, grant: Grant, initial: bool = False) -> None:
        old = self._grant
        self._grant = grant
        apollo = getattr(self, "apollo", None)
        key = grant.configcenter.access_key_secret
        if apollo is not None and key and not self.conf.get("ykafka.configcenter.secret"):
            apollo.secret = key  # the app's own config-center key follows its grant (rotated with its secret)
        if initial or old is None or (old.acl, old.clusters, old.default_cluster) != (
                grant.acl, grant.clusters, grant.default_cluster):
            self.acl.reset(grant)
            self.hot.bump()
            if not initial:
                log.info("ykafka.grant.changed", **grant.summary())
                for listener in list(self._grant_listeners):
                    try:
                        listener(grant)
                    except Exception:
                        log.exception("ykafka.grant.listener_failed")

    def _validate_cluster_names(self, name: str, value: Any) -> str | None:
        if name in ("route.cluster", "route.standby") and value not in self.clusters():
            return f"unknown cluster {value!r} (known: {', '.join(sorted(self.clusters()))})"
        return None

    # --- hot config --------------------------------------------------------------------------------

    def _start_configcenter(self) -> None:
        grant = self._grant
        url = self.conf.get("ykafka.configcenter.url")
        meta = self.conf.get("ykafka.configcenter.meta")
        if not url and meta:
            try:  # Apollo's apollo.meta: the config-service instances come from /services/config
                url = ",".join(resolve_meta(meta, self.conf.ms("ykafka.configcenter.fetch.timeout.ms")))
            except ValueError as exc:
                log.warning("ykafka.configcenter.meta_failed", error=str(exc))
        url = url or (grant.configcenter.url if grant else None)
        if not url:
            log.info("ykafka.configcenter.disabled", reason="no config-center URL (local config only)")
            return
        cc = grant.configcenter if grant else None
        explicit = self.conf.explicit
        app_id = (cc.app_id if cc and "ykafka.configcenter.app.id" not in explicit
                  else self.conf.get("ykafka.configcenter.app.id"))
        cluster = (cc.cluster if cc and "ykafka.configcenter.cluster" not in explicit
                   else self.conf.get("ykafka.configcenter.cluster"))
        secret = self.conf.get("ykafka.configcenter.secret") or (cc.access_key_secret if cc else None)
        if cc and "ykafka.configcenter.namespace.prefix" not in explicit:
            self.hot.prefix = cc.namespace_prefix
        self.apollo = ApolloClient(
            url, app_id, cluster, self.ip, self.conf.cache_dir, self._on_namespace, secret=secret,
            longpoll_timeout_s=self.conf.ms("ykafka.configcenter.longpoll.timeout.ms"),
            refresh_interval_s=self.conf.ms("ykafka.configcenter.refresh.interval.ms"),
            fetch_timeout_s=self.conf.ms("ykafka.configcenter.fetch.timeout.ms"),
            label=self.conf.get("ykafka.client.label"), instance=self.client_id)
        self.subscribe_scope(catalog.GLOBAL)
        if self.group:
            self.subscribe_scope(Scope(ScopeKind.GROUP, self.group))
        self.apollo.start()

    def _on_namespace(self, config: NamespaceConfig) -> None:
        self._want_routes(config.namespace, config.configurations)
        self.hot.apply(config.namespace, config.configurations, config.release_key)
        if self._started:
            # the console's closed loop: report the applied / rejected release key soon after each change
            self.report_now()

    def _want_routes(self, namespace: str, raw: Mapping[str, Any]) -> None:
        """A route naming a cluster the grant lacks: ask the MetaServer for it before the value is checked.

        The grant carries only clusters this app can reach; a route released (or gray-released to this IP) a
        moment ago names one the grant may not have yet. The MetaServer confirms it in that namespace."""
        grant, client = self._grant, self._grant_client
        if grant is None or client is None:
            return
        asked = [(namespace, str(raw[key])) for key in ROUTE_KEYS
                 if raw.get(key) and str(raw[key]) not in grant.clusters]
        now = time.monotonic()
        if not [want for want in asked if now - self._wants.get(want, -WANT_INTERVAL_S) >= WANT_INTERVAL_S]:
            return
        self._wants.update(dict.fromkeys(asked, now))
        try:
            self._set_grant(client.renew(grant, self._held_wants(asked)))
        except (AuthError, MetaServerUnavailable) as exc:
            log.warning("ykafka.grant.want_failed", namespace=namespace, clusters=[c for _, c in asked],
                        error=str(exc))

    def _held_wants(self, extra: list[Want] | None = None) -> list[Want]:
        """Wants whose route value is still in force (plus ``extra``, about to be applied)."""
        held = list(extra or [])
        for want in list(self._wants):
            namespace, cluster = want
            if namespace.startswith(PLACEMENT):
                with self._placements_lock:
                    placed = self._placements.get(namespace[len(PLACEMENT):], _UNKNOWN)
                if placed == cluster:
                    held.append(want)
                continue
            scope = self.hot.scope_of(namespace)
            if scope is not None and cluster in (str(v) for k, v in self.hot.layer(scope).items() if k in ROUTE_KEYS):
                held.append(want)
            elif want not in held:
                self._wants.pop(want, None)
        one_per_cluster = {cluster: (namespace, cluster) for namespace, cluster in sorted(set(held), reverse=True)}
        return sorted(one_per_cluster.values())[:100]  # one proof per cluster is enough

    def subscribe_scope(self, scope: Scope, timeout_s: float | None = None) -> None:
        """Watch one scope's namespace (no-op without a config center); first call fetches it (bounded)."""
        if self.apollo is None:
            return
        ns = self.hot.namespace(scope)
        with self._lock:
            if ns in self._subscribed:
                return
            self._subscribed.add(ns)
        self.apollo.subscribe(ns, timeout_s)

    def subscribe(self, topic: str | None = None, group: str | None = None, cluster: str | None = None) -> None:
        """Make sure every namespace that resolution for (topic, group, cluster) reads is watched."""
        if self.apollo is None:
            return
        for scope in catalog.precedence(topic, group, cluster)[:-1]:  # global is watched from the start
            self.subscribe_scope(scope)

    def route(self, topic: str | None = None, group: str | None = None) -> str:
        """The cluster a topic (or group) uses: ``route.cluster`` at topic scope, else the topic's placement,
        else ``route.cluster`` by precedence, else the default cluster (docs/architecture.md, "Routing")."""
        value = self.hot.resolve(topic, group, None, ["route.cluster"])["route.cluster"]
        if topic is not None:
            source = self.hot.sources(topic, group, None, ["route.cluster"])["route.cluster"]
            if not (value and source == self.hot.namespace(Scope(ScopeKind.TOPIC, topic))):
                placed = self.placement(topic)
                if placed is not None and placed in self.clusters():
                    return placed
        if value and value in self.clusters():
            return str(value)
        return self.default_cluster

    def placement(self, topic: str) -> str | None:
        """The MetaServer's placement of ``topic`` (asked once per topic and cached; None when it has none).

        A placement on a cluster the grant lacks is asked for as a want (``placement:<topic>``)."""
        grant, client = self._grant, self._grant_client
        if grant is None or client is None or not grant.placements:
            return None
        with self._placements_lock:
            cached = self._placements.get(topic, _UNKNOWN)
        if cached is not _UNKNOWN:
            return cached  # type: ignore[return-value]
        try:
            cluster = client.placement(grant, topic)
        except MetaServerUnavailable as exc:  # not cached: asked again at the next resolution
            log.warning("ykafka.placement.lookup_failed", topic=topic, error=str(exc))
            return None
        with self._placements_lock:
            self._placements[topic] = cluster
        if cluster is not None and cluster not in grant.clusters:
            want = (PLACEMENT + topic, cluster)
            self._wants[want] = time.monotonic()
            try:
                self._set_grant(client.renew(grant, self._held_wants([want])))
            except (AuthError, MetaServerUnavailable) as exc:
                log.warning("ykafka.grant.want_failed", topic=topic, cluster=cluster, error=str(exc))
        return cluster

    def effective(self, topic: str | None = None, group: str | None = None,
                  cluster: str | None = None) -> dict[str, Any]:
        """Every catalog key's effective typed value for this (topic, group, cluster)."""
        return self.hot.resolve(topic, group, cluster)

    def sources(self, topic: str | None = None, group: str | None = None,
                cluster: str | None = None) -> dict[str, str]:
        """Which namespace (or ``local`` / ``default``) supplies each key."""
        return self.hot.sources(topic, group, cluster)

    def add_listener(self, listener: Callable[[ConfigChange], None]) -> None:
        """Config-change events (what changed, what was rejected), called from the poll thread."""
        self.hot.add_listener(listener)

    def add_version_listener(self, listener: Callable[[int], None]) -> None:
        """Called with the new :attr:`version` whenever it moves (config or grant); keep it cheap."""
        self.hot.add_version_listener(listener)

    def release_keys(self) -> dict[str, str]:
        return self.hot.release_keys()

    # --- reports -----------------------------------------------------------------------------------

    def set_report_provider(self, provider: ReportProvider) -> None:
        self._report_provider = provider

    def record_error(self, error: Mapping[str, Any]) -> None:
        self._errors.append({"at": time.time(), **error})

    def report_now(self) -> None:
        """Ask the background thread to post a report soon (never blocks the caller)."""
        self._wake.set()

    def report_body(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        proc = process.current()
        body: dict[str, Any] = {
            "client_id": self.client_id, "app_id": self.app_id, "ip": self.ip, "hostname": proc.host,
            "pid": proc.pid, "process_started": proc.started, "language": "python",
            "versions": transport.versions(), "role": self.role,
            "topics": [], "group": self.group, "cluster": self.default_cluster,
            "config_release_keys": self.release_keys(), "state": self.state,
        }
        provider = self._report_provider
        if provider is not None:
            try:
                provided = dict(provider())
            except Exception as exc:
                provided = {}
                log.warning("ykafka.report.provider_failed", error=repr(exc))
            extra = dict(provided.pop("extra", {}) or {})
            body.update({k: v for k, v in provided.items() if k in body})
        if self.conf.get("ykafka.client.label"):
            extra["label"] = self.conf.get("ykafka.client.label")
        extra["effective_config"] = self._effective_report(list(body["topics"] or [])[:_EFFECTIVE_TOPICS])
        structured = [r.as_dict() for r in self.hot.rejections()] + list(self._errors)
        body["errors"] = [_error_text(e) for e in structured]  # the MetaServer stores strings
        extra["errors"] = structured
        if self.apollo is not None and self.apollo.last_error:
            extra.setdefault("configcenter_last_error", self.apollo.last_error)
        body["extra"] = extra
        return body

    def _effective_report(self, topics: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
        """Per topic ("*": no topic) the values not at their defaults and the layer each comes from, for the
        console's client page (topic > group > cluster > global > local > default)."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for topic in [None, *topics]:
            values = self.effective(topic, self.group, self.default_cluster)
            sources = self.sources(topic, self.group, self.default_cluster)
            out[topic or "*"] = {name: {"value": catalog.render(name, values[name]), "scope": source}
                                 for name, source in sources.items() if source != "default" and name in values}
        return out

    def _report(self) -> bool:
        grant, client = self._grant, self._grant_client
        if grant is None or client is None or not self.conf.get("ykafka.report.enabled"):
            return False
        ok = client.report(grant, self.report_body())
        if ok:
            self.reports_sent += 1
        return ok

    # --- background: renewal + heartbeat reports ---------------------------------------------------

    def _maintain(self) -> None:
        self._guarded("report", self._report)
        next_renew = time.monotonic() + self._renew_interval()
        next_report = next_renew
        while not self._stop.is_set():
            timeout = max(0.05, min(next_renew, next_report) - time.monotonic())
            woken = self._wake.wait(timeout)
            if self._stop.is_set():
                return
            now = time.monotonic()
            if woken:
                self._wake.clear()
                self._guarded("report", self._report)
                next_report = now + self._renew_interval()
            if now >= next_renew:
                delay = self._guarded("renew", self._renew)
                next_renew = now + (delay if isinstance(delay, (int, float)) else _RETRY_AFTER_FAILURE_S)
            if now >= next_report:
                self._guarded("report", self._report)
                next_report = time.monotonic() + self._renew_interval()

    def _guarded(self, step: str, work: Callable[[], Any]) -> Any:
        """One step of the background thread: an unexpected failure is logged and recorded in the client
        report, and the thread goes on (a dead renewal thread would let the grant expire without a word)."""
        try:
            return work()
        except Exception as exc:
            log.exception("ykafka.runtime.background_failed", step=step)
            self.record_error({"type": "background_failed", "step": step, "reason": repr(exc)})
            return None

    def _renew_interval(self) -> float:
        grant = self._grant
        return grant.renew_interval_s if grant is not None else 60.0

    def _renew(self) -> float:
        """Renew the grant; returns the delay until the next attempt."""
        grant, client = self._grant, self._grant_client
        if grant is None or client is None:
            return 60.0
        try:
            self._set_grant(client.renew(grant, self._held_wants()))
            return self._renew_interval()
        except MetaServerUnavailable as exc:
            left = grant.expires_at - time.time()
            level = log.error if left <= 0 else log.warning
            level("ykafka.grant.renew_failed", error=str(exc), expires_in_s=round(left, 1))
            self.record_error({"type": "grant_renew_failed", "reason": str(exc)})
            return min(self._renew_interval(), 5.0)
        except AuthError as exc:
            log.error("ykafka.grant.refused", error=str(exc))
            self.record_error({"type": "grant_refused", "reason": str(exc)})
            return self._renew_interval()
