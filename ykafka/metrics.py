"""Metrics and client events: librdkafka statistics + handler timings -> ``__ykafka_metrics`` events.

Sources:

* librdkafka statistics (``statistics.interval.ms`` + ``stats_cb``, see :meth:`Metrics.rdkafka_settings`):
  send latency per broker (``int_latency`` queueing + ``rtt``, librdkafka's own windowed percentiles),
  messages sent / received and transmit / receive errors per interval, per-partition consumer lag with
  the committed offset and high watermark;
* handler timings the consumer reports (:meth:`Metrics.observe`): consume latency (message timestamp to
  hand-over) and processing time, summarised per interval into count / sum / max / p50 / p95 / p99;
* counters the SDK bumps on errors (:meth:`Metrics.count`).

Everything goes through the same non-blocking :class:`~ykafka.sink.EventSink` as trace events, and to
an optional Prometheus endpoint (``ykafka.prometheus.port``) served by ``prometheus_client``.

Client events (:meth:`Metrics.client_event`, or :meth:`Metrics.watch_client` for a periodic report from a
provider such as ``Runtime.report_body``) carry the same content as the MetaServer client report and go to
``__ykafka_clients``: a report at start, on every change, every minute, and a last one on close.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from ykafka import catalog, events
from ykafka.acl import RETRY_NAMESPACE
from ykafka.config import Option
from ykafka.events import MetricName
from ykafka.sink import EventSink

log = structlog.get_logger(__name__)


_port = catalog.optional(catalog.int_range(0, 65535))
_interval = catalog.int_range(100, 3_600_000)


#: local options of the metrics (``ykafka.metrics.enabled`` is :mod:`ykafka.observability`'s)
OPTIONS = (
    Option("ykafka.prometheus.port", _port, None, "serve Prometheus metrics on this port (unset: no endpoint)"),
    Option("ykafka.metrics.interval.ms", _interval, 10_000,
           "librdkafka statistics interval and handler-timing summary period"),
    Option("ykafka.clients.interval.ms", _interval, 60_000, "period of client events to __ykafka_clients"),
)

Key = tuple[str, str | None, str | None]  # (metric name, topic, group)


def _quantile(ordered: list[float], q: float) -> float:
    """Nearest-rank quantile of a sorted list."""
    index = min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))
    return ordered[index]


_random = random.random
_TINY = 1e-300  # random() may return 0.0; log() must not see it
_ALMOST_1 = 1.0 - 2.0 ** -53


class _Timer:
    """One interval's summary of a timing: exact count / sum / max and a uniform reservoir of samples.

    Once the reservoir is full, Li's Algorithm L picks which later samples replace one (``next_at`` is the
    count of the next to keep, ``w`` its running weight): a random draw per kept sample, not per sample.
    """

    __slots__ = ("count", "sum", "max", "samples", "offered", "w", "next_at")

    def __init__(self) -> None:
        self.count = 0
        self.offered = 0  # samples offered to the reservoir (fewer than count when the caller samples)
        self.sum = 0.0
        self.max = 0.0
        self.samples: list[float] = []
        self.w = 1.0
        self.next_at = 0

    def skip(self, size: int) -> None:
        """Advance to the next sample Algorithm L keeps (``size``: the reservoir's)."""
        self.w *= math.exp(math.log(_random() or _TINY) / size)
        self.next_at += int(math.log(_random() or _TINY) / math.log1p(-min(max(self.w, _TINY), _ALMOST_1))) + 1


class _Prometheus:
    """Process-wide Prometheus registry and endpoint (one port per process)."""

    _instance: _Prometheus | None = None
    _lock = threading.Lock()

    def __init__(self, port: int) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

        self.registry = CollectorRegistry()
        labels = ["client_id", "name", "topic", "group", "cluster"]
        self.latency = Gauge("ykafka_latency_ms", "windowed latency percentiles (ms)", [*labels, "quantile"],
                             registry=self.registry)
        self.lag = Gauge("ykafka_consumer_lag", "messages behind the high watermark",
                         ["client_id", "topic", "partition", "group", "cluster"], registry=self.registry)
        self.counter = Counter("ykafka_events", "messages and errors counted by the SDK", labels,
                               registry=self.registry)
        self.dropped = Gauge("ykafka_observability_dropped", "trace / metrics events dropped",
                             ["client_id", "type", "why"], registry=self.registry)
        server, _thread = start_http_server(port, registry=self.registry)
        self.port = int(server.server_port)

    @classmethod
    def get(cls, port: int) -> _Prometheus:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls(port)
            return cls._instance


class Metrics:
    """Turns one client's statistics and timings into metrics events (see the module docstring)."""

    def __init__(self, sink: EventSink | None, client_id: str, role: str, *, app: str = "", ip: str = "",
                 cluster: str = "", group: str | None = None, interval_s: float = 10.0,
                 prometheus_port: int | None = None, reservoir: int = 1024, own_sink: bool = True,
                 client_interval_s: float = 60.0) -> None:
        self.sink = sink
        self.client_id = client_id
        self.role = role
        self.app = app
        self.ip = ip
        self.cluster = cluster
        self.group = group
        self.interval_s = interval_s
        self.client_interval_s = client_interval_s
        self._reservoir = max(1, reservoir)
        self._own_sink = own_sink
        self._timers: dict[Key, _Timer] = {}
        self._counters: dict[Key, float] = {}
        self._previous: dict[tuple[str, ...], float] = {}  # cumulative librdkafka counters -> deltas
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._client_provider: Callable[[], Mapping[str, Any]] | None = None
        self._client_wake = threading.Event()
        self.last_lag: dict[tuple[str, int], tuple[int, int, int]] = {}  # (topic, partition) -> lag, committed, hwm
        #: cumulative counts since start and the latest send p99, for the client report's ``health`` (the
        #: MetaServer compares a rollout's canary clients with the others on them)
        self.totals: dict[str, float] = {}
        self.send_p99_ms: float | None = None
        self.stats_seen = 0
        self.prometheus: _Prometheus | None = None
        if prometheus_port is not None:
            try:
                self.prometheus = _Prometheus.get(prometheus_port)
            except OSError as exc:  # port taken: metrics still flow to Kafka
                log.warning("ykafka.metrics.prometheus_unavailable", port=prometheus_port, error=str(exc))
        self._thread = threading.Thread(target=self._run, name=f"ykafka-metrics-{client_id}", daemon=True)
        self._thread.start()

    @classmethod
    def for_client(cls, client_id: str, ip: str, producer_conf: Mapping[str, Any] | None, role: str, *,
                   app: str = "", cluster: str = "", group: str | None = None, interval_s: float = 10.0,
                   prometheus_port: int | None = None, sink: EventSink | None = None) -> Metrics:
        """Metrics of one client, through ``sink`` or a new sink on ``producer_conf`` (None: Prometheus only)."""
        own = sink is None
        if sink is None and producer_conf:
            sink = EventSink(producer_conf, name=f"ykafka-metrics-{client_id}")
        return cls(sink, client_id, role, app=app, ip=ip, cluster=cluster, group=group, interval_s=interval_s,
                   prometheus_port=prometheus_port, own_sink=own)

    def rdkafka_settings(self) -> dict[str, Any]:
        """Add these to the client's librdkafka config to receive its statistics."""
        return {"statistics.interval.ms": max(100, int(self.interval_s * 1000)), "stats_cb": self.stats_cb}

    # --- handler timings and counters (called by the SDK) -----------------------------------------

    def observe(self, name: str, ms: float, topic: str | None = None, group: str | None = None) -> None:
        """One timing sample (e.g. ``consume.latency_ms``); summarised per interval, reservoir-sampled."""
        self.observe_many(name, (ms,), topic, group)

    def observe_many(self, name: str, values: Sequence[float], topic: str | None = None,
                     group: str | None = None, count: int | None = None, total: float | None = None) -> None:
        """Several timing samples under one lock (a worker's batch: the per-message path appends to a list).

        ``count`` / ``total``: how many events and their sum when ``values`` is a sample of them (a fast
        handler timed one message in several); the percentiles and max then come from the sample."""
        if not values and not count:
            return
        key = (name, topic, group)
        reservoir = self._reservoir
        with self._lock:  # worker threads share a timer, and flush_timers swaps them out meanwhile
            timer = self._timers.get(key)
            if timer is None:
                timer = self._timers[key] = _Timer()
            timer.count += len(values) if count is None else count
            timer.sum += sum(values) if total is None else total
            if not values:
                return
            top = max(values)
            if top > timer.max:
                timer.max = top
            samples = timer.samples
            offered = timer.offered
            room = reservoir - len(samples)
            if room > 0:
                samples.extend(values[:room])
                offered += min(room, len(values))
                if len(samples) < reservoir:
                    timer.offered = offered
                    return
                values = values[room:]
                timer.next_at = offered
                timer.skip(reservoir)
            end = offered + len(values)
            while timer.next_at <= end:  # the reservoir is full: only the samples Algorithm L keeps
                samples[int(_random() * reservoir)] = values[timer.next_at - offered - 1]
                timer.skip(reservoir)
            timer.offered = end

    def count(self, name: str, n: float = 1, topic: str | None = None, group: str | None = None) -> None:
        """Bump a counter (e.g. ``send.errors`` for a failed delivery); emitted as a delta per interval."""
        key = (name, topic, group)
        with self._lock:
            self._counters[key] = self._counters.get(key, 0) + n
            self.totals[name] = self.totals.get(name, 0) + n

    # --- librdkafka statistics -------------------------------------------------------------------

    def stats_cb(self, stats_json: str) -> None:
        """librdkafka ``stats_cb``: parse and emit; never raises into librdkafka."""
        try:
            self.ingest(json.loads(stats_json))
        except Exception:
            log.exception("ykafka.metrics.stats_failed")

    def ingest(self, stats: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Metric events of one statistics document (also emitted); returns them for inspection."""
        self.stats_seen += 1
        ts = events.now_ms()
        out: list[dict[str, Any]] = []
        kind = stats.get("type", self.role)
        instance = str(stats.get("name", ""))  # one Metrics may serve several librdkafka clients
        for broker_name, broker in (stats.get("brokers") or {}).items():
            if broker.get("nodeid", -1) < 0:
                continue  # bootstrap placeholder entries
            name = broker.get("name", broker_name)
            rtt, queued = broker.get("rtt") or {}, broker.get("int_latency") or {}
            if kind == "producer" and (rtt.get("cnt") or queued.get("cnt")):
                out.append(self._summary(ts, MetricName.SEND_LATENCY, queued, rtt, broker=name))
                out.append(self._summary(ts, MetricName.SEND_RTT, rtt, None, broker=name))
            errors = self._delta(("err", instance, name), broker.get("txerrs", 0) + broker.get("req_timeouts", 0)
                                 + broker.get("rxerrs", 0))
            if errors:
                metric = MetricName.SEND_ERRORS if kind == "producer" else MetricName.CONSUME_ERRORS
                out.append(self._event(ts, metric, broker=name, count=int(errors), value=errors))
        for topic, tstats in (stats.get("topics") or {}).items():
            if topic.startswith("__") and not topic.startswith(RETRY_NAMESPACE):  # internal, but not a group's retries
                continue
            sent = received = 0
            for pid, part in (tstats.get("partitions") or {}).items():
                partition = int(pid)
                if partition < 0:
                    continue
                sent += part.get("txmsgs", 0)
                received += part.get("rxmsgs", 0)
                if kind == "consumer":
                    sample = self._lag(ts, topic, partition, part)
                    if sample is not None:
                        out.append(sample)
            if kind == "producer":
                delta = self._delta(("tx", instance, topic), sent)
                if delta:
                    out.append(self._event(ts, MetricName.SEND_MSGS, topic=topic, count=int(delta), value=delta))
            else:
                delta = self._delta(("rx", instance, topic), received)
                if delta:
                    out.append(self._event(ts, MetricName.CONSUME_MSGS, topic=topic, group=self.group,
                                           count=int(delta), value=delta))
        p99s = [e["p99"] for e in out if e["name"] == MetricName.SEND_LATENCY and e.get("count")]
        if p99s:
            self.send_p99_ms = max(p99s)
        with self._lock:
            for e in out:
                if e["name"] in (MetricName.SEND_MSGS, MetricName.SEND_ERRORS, MetricName.CONSUME_MSGS,
                                 MetricName.CONSUME_ERRORS):
                    self.totals[e["name"]] = self.totals.get(e["name"], 0) + float(e.get("value") or 0)
        self._emit(out)
        return out

    def health(self) -> dict[str, float | None]:
        """Cumulative sends, send errors, consumed, consume / handler errors, the latest send p99 and the
        consumer lag now (summed over partitions): what a client report's ``health`` carries."""
        with self._lock:
            out: dict[str, float | None] = {k: round(v, 3) for k, v in self.totals.items()}
        out["send.p99_ms"] = self.send_p99_ms
        lags = [lag for lag, _, _ in list(self.last_lag.values()) if lag >= 0]
        out["lag"] = float(sum(lags)) if lags else None
        return out

    def _lag(self, ts: int, topic: str, partition: int, part: Mapping[str, Any]) -> dict[str, Any] | None:
        committed = int(part.get("committed_offset", -1001))
        end = int(part.get("hi_offset", -1))
        if end < 0 or part.get("fetch_state") in ("none", "stopped"):
            return None
        lag = int(part.get("consumer_lag", -1))
        if lag < 0:
            lag = end - committed if committed >= 0 else -1
        self.last_lag[(topic, partition)] = (lag, committed, end)
        return self._event(ts, MetricName.LAG, topic=topic, group=self.group, partition=partition,
                           value=float(lag), committed=committed, end_offset=end, source="stats")

    def _delta(self, key: tuple[str, ...], cumulative: float) -> float:
        previous = self._previous.get(key)
        self._previous[key] = cumulative
        if previous is None or cumulative < previous:
            return cumulative if previous is None else 0.0
        return cumulative - previous

    def _summary(self, ts: int, name: str, first: Mapping[str, Any], second: Mapping[str, Any] | None,
                 **fields: Any) -> dict[str, Any]:
        """A latency summary from librdkafka window stats (µs); two windows add up (an upper bound)."""

        def ms(field: str) -> float:
            total = float(first.get(field, 0) or 0)
            if second is not None:
                total += float(second.get(field, 0) or 0)
            return round(total / 1000.0, 3)

        count = int(first.get("cnt", 0) or (second or {}).get("cnt", 0) or 0)
        return self._event(ts, name, count=count, sum=round(ms("avg") * count, 3), max=ms("max"),
                           p50=ms("p50"), p95=ms("p95"), p99=ms("p99"), source="stats", **fields)

    def _event(self, ts: int, name: str, **fields: Any) -> dict[str, Any]:
        event: dict[str, Any] = {"ts": ts, "name": str(name), "client_id": self.client_id, "app": self.app,
                                 "ip": self.ip, "role": self.role, "cluster": self.cluster, "source": "stats"}
        event.update(fields)
        return event

    # --- periodic work ---------------------------------------------------------------------------

    def _run(self) -> None:
        next_timers = time.monotonic() + self.interval_s
        next_client = time.monotonic() + self.client_interval_s  # the first report comes from watch_client()
        while not self._stop.is_set():
            now = time.monotonic()
            timeout = max(0.01, min(next_timers, next_client) - now)
            if self._client_wake.wait(timeout):
                self._client_wake.clear()
                next_client = 0.0
            if self._stop.is_set():
                return  # close() sends the last interval and client event itself
            now = time.monotonic()
            try:
                if now >= next_timers:
                    self.flush_timers()
                    next_timers = now + self.interval_s
                if now >= next_client and self._client_provider is not None:
                    self._report_client()
                    next_client = now + self.client_interval_s
                elif self._client_provider is None:
                    next_client = now + self.client_interval_s
            except Exception:
                log.exception("ykafka.metrics.periodic_failed")

    def flush_timers(self) -> list[dict[str, Any]]:
        """Emit the summaries and counters of the interval that just ended; returns the events."""
        with self._lock:
            timers, self._timers = self._timers, {}
            counters, self._counters = self._counters, {}
        ts = events.now_ms()
        out = []
        for (name, topic, group), timer in timers.items():
            if not timer.count:
                continue
            ordered = sorted(timer.samples)
            out.append(self._event(ts, name, topic=topic, group=group, count=timer.count,
                                   sum=round(timer.sum, 3), max=round(timer.max, 3),
                                   p50=round(_quantile(ordered, 0.50), 3), p95=round(_quantile(ordered, 0.95), 3),
                                   p99=round(_quantile(ordered, 0.99), 3), source="timer"))
        for (name, topic, group), n in counters.items():
            out.append(self._event(ts, name, topic=topic, group=group, count=int(n), value=float(n),
                                   source="timer"))
        self._emit(out)
        return out

    def _emit(self, out: list[dict[str, Any]]) -> None:
        sink = self.sink
        if sink is not None:
            for event in out:
                sink.put("metric", events.row("metric", event))
        prom = self.prometheus
        if prom is not None:
            self._to_prometheus(prom, out)

    def _to_prometheus(self, prom: _Prometheus, out: list[dict[str, Any]]) -> None:
        for event in out:
            labels = (self.client_id, event["name"], event.get("topic") or "", event.get("group") or "",
                      self.cluster)
            if event["name"] == MetricName.LAG:
                prom.lag.labels(self.client_id, event.get("topic") or "", str(event.get("partition")),
                                event.get("group") or "", self.cluster).set(event["value"])
            elif "p50" in event:
                for q in ("p50", "p95", "p99"):
                    prom.latency.labels(*labels, q).set(event[q])
            elif event.get("value"):
                prom.counter.labels(*labels).inc(event["value"])
        if self.sink is not None:
            for kind, counts in self.sink.stats().items():
                prom.dropped.labels(self.client_id, kind, "full").set(counts["dropped_full"])
                prom.dropped.labels(self.client_id, kind, "undeliverable").set(counts["dropped_undeliverable"])

    # --- client events ---------------------------------------------------------------------------

    def client_event(self, body: Mapping[str, Any]) -> bool:
        """Send one client event built from a MetaServer client-report body (``Runtime.report_body()``)."""
        if self.sink is None:
            return False
        return self.sink.put("client", events.row("client", client_event_from_report(body)))

    def watch_client(self, provider: Callable[[], Mapping[str, Any]], interval_s: float | None = None) -> None:
        """Report ``provider()`` now, every ``interval_s`` and on :meth:`client_changed` (history + real time)."""
        if interval_s is not None:
            self.client_interval_s = interval_s
        self._client_provider = provider
        self._client_wake.set()

    def client_changed(self) -> None:
        """Ask for a client event soon (state change, new topic); never blocks."""
        self._client_wake.set()

    def _report_client(self) -> None:
        provider = self._client_provider
        if provider is not None:
            self.client_event(provider())

    # --- life cycle ------------------------------------------------------------------------------

    def close(self, timeout: float = 5.0, final_state: str | None = "closed") -> None:
        """Emit the last interval (and a last client event with ``final_state``), then stop."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._client_wake.set()
        self._thread.join(timeout=2.0)
        self.flush_timers()
        provider = self._client_provider
        if provider is not None and final_state is not None:
            body = dict(provider())
            body["state"] = final_state
            self.client_event(body)
        if self.sink is not None and self._own_sink:
            self.sink.close(timeout)  # a shared sink is flushed and closed by its owner


def client_event_from_report(body: Mapping[str, Any]) -> dict[str, Any]:
    """Flatten a client-report body into a client event (versions and topics as plain columns)."""
    versions = body.get("versions") or {}
    extra = body.get("extra") or {}
    topics = body.get("topics") or []
    return {
        "ts": int(body.get("ts") or events.now_ms()),
        "client_id": body.get("client_id"), "app": body.get("app_id") or body.get("app"),
        "ip": body.get("ip"), "hostname": body.get("hostname"), "pid": body.get("pid"),
        "language": body.get("language", "python"),
        **{f"{lib}_version": versions.get(lib) or body.get(f"{lib}_version") for lib in events.VERSION_LIBS},
        "role": body.get("role"), "topics": ",".join(topics) if isinstance(topics, list | tuple) else topics,
        "group": body.get("group"), "cluster": body.get("cluster"), "state": body.get("state"),
        "ephemeral": bool(body.get("ephemeral") or extra.get("ephemeral") or False),
    }


def local_versions() -> dict[str, str]:
    """ykafka / client library / librdkafka versions of this process (as in the client report)."""
    from ykafka import transport

    return transport.versions()
