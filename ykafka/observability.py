"""One client's observability: its :class:`~ykafka.tracing.Tracer` and :class:`~ykafka.metrics.Metrics` sharing
one :class:`~ykafka.sink.EventSink` on the trace cluster, and the librdkafka statistics settings of its own Kafka
clients (beside an application's own ``stats_cb``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from ykafka import catalog, events
from ykafka.config import Option
from ykafka.metrics import Metrics
from ykafka.sink import EventSink, sink_conf

log = structlog.get_logger(__name__)


OPTIONS = (
    Option("ykafka.metrics.enabled", catalog.boolean, True,
           "send librdkafka statistics, handler timings and client events to __ykafka_metrics / __ykafka_clients"),
)


class Observability:
    """One client's tracer and metrics, sharing one :class:`EventSink` on the trace cluster.

    Built by the Producer / Consumer from their :class:`~ykafka.runtime.Runtime`. The sink (one
    librdkafka producer and one thread) is created on first need: at once when metrics are enabled
    (``ykafka.metrics.enabled``, default true), else when a topic first asks for tracing. Failing to
    build it (an unknown ``ykafka.trace.cluster``) disables observability with a warning, never the client.
    """

    def __init__(self, runtime: Any, role: str, group: str | None = None) -> None:
        self.runtime = runtime
        self.role = role
        self.group = group
        self._options: Mapping[str, Any] = runtime.conf.options
        self._sink: EventSink | None = None
        self._tracer: Any = None
        self._failed = False
        self._lock = threading.Lock()
        self.metrics: Metrics | None = None
        if self._options["ykafka.metrics.enabled"]:
            sink = self.sink()
            if sink is not None:
                self.metrics = Metrics(
                    sink, runtime.client_id, role, app=runtime.app_id, ip=runtime.ip, cluster=self.cluster,
                    group=group, interval_s=float(self._options["ykafka.metrics.interval.ms"]) / 1000,
                    prometheus_port=self._options.get("ykafka.prometheus.port"), own_sink=False,
                    client_interval_s=float(self._options["ykafka.clients.interval.ms"]) / 1000)
                self.metrics.watch_client(runtime.report_body)

    @property
    def cluster(self) -> str:
        return str(self._options.get("ykafka.trace.cluster") or self.runtime.default_cluster)

    def sink(self) -> EventSink | None:
        if self._sink is None and not self._failed:
            with self._lock:
                if self._sink is None and not self._failed:
                    try:
                        conf = sink_conf(self.runtime.cluster(self.cluster).rdkafka(), self._options)
                        self._sink = EventSink(conf, queue_max=int(self._options["ykafka.trace.queue.max"]),
                                               topics=telemetry_topics(conf, self.runtime.app_id),
                                               name=f"ykafka-events-{self.runtime.client_id}")
                    except Exception as exc:
                        self._failed = True
                        log.warning("ykafka.observability.disabled", cluster=self.cluster, error=str(exc))
        return self._sink

    def tracer(self) -> Any:
        """The client's :class:`~ykafka.tracing.Tracer` (a disabled one when no sink can be had)."""
        if self._tracer is None:
            from ykafka.tracing import Tracer

            sink = self.sink()
            self._tracer = (Tracer(sink, self.runtime.client_id, self.runtime.app_id, self.runtime.ip,
                                   self.runtime.default_cluster, own_sink=False)
                            if sink is not None else Tracer.disabled())
        return self._tracer

    def rdkafka_settings(self) -> dict[str, Any]:
        """librdkafka statistics settings for the client's own Kafka clients ({} when metrics are off)."""
        return self.metrics.rdkafka_settings() if self.metrics is not None else {}

    def add_statistics(self, props: dict[str, Any]) -> None:
        """Put our statistics settings into a client's librdkafka ``props``, keeping the application's
        ``stats_cb`` (see :func:`merge_statistics`)."""
        merge_statistics(props, self.rdkafka_settings())


    def close(self, timeout: float = 1.0) -> None:
        """Last metrics interval and a last client event (``closed``), then send what is queued within
        ``timeout`` (short: closing a client must not wait long for a trace cluster that is down)."""
        if self.metrics is not None:
            self.metrics.close(timeout)
        if self._tracer is not None:
            self._tracer.close(timeout)
        if self._sink is not None:
            self._sink.close(timeout)


def telemetry_topics(conf: Mapping[str, Any], app_id: str | None) -> dict[str, str] | None:
    """Where this client's events go: on a cluster where it authenticates as its app's own principal (SASL), the
    app's own topics (``__ykafka_trace.<app>``, ``ykafka.events.app_topics``), the only telemetry topics its
    bindings let it write, so no app can speak for another and the pipeline attributes each event to the app
    its topic belongs to; elsewhere (the open stack) the shared ones (None)."""
    if app_id and str(conf.get("security.protocol") or "").upper().startswith("SASL") and conf.get("sasl.username"):
        return events.app_topics(app_id)
    return None


def merge_statistics(props: dict[str, Any], ours: Mapping[str, Any]) -> None:
    """Our ``stats_cb`` / ``statistics.interval.ms`` in ``props`` beside the application's own: librdkafka
    takes one callback, so with both, statistics come at the shorter interval and each callback is called
    at its own (the application's is called only when it asked for statistics, as librdkafka would)."""
    if not ours:
        return
    user_cb = props.get("stats_cb")
    user_ms = int(props.get("statistics.interval.ms") or 0)
    if not callable(user_cb) or user_ms <= 0:
        props.update(ours)
        return
    our_cb, our_ms = ours["stats_cb"], int(ours["statistics.interval.ms"])
    # chained once more (metrics, then the DR engine's stall watch): one flat chain, each callback at its interval
    theirs = user_cb.callbacks if isinstance(user_cb, ChainedStats) else ((user_cb, user_ms),)
    props["stats_cb"] = ChainedStats(((our_cb, our_ms), *theirs))
    props["statistics.interval.ms"] = min(user_ms, our_ms)


class ChainedStats:
    """One librdkafka ``stats_cb`` calling several, each at its own interval. Equal when built from the same
    callbacks, so the producer's client settings (its client cache key) stay the same across resolutions."""

    def __init__(self, callbacks: tuple[tuple[Callable[[str], Any], int], ...]) -> None:
        self.callbacks = callbacks
        self._due = [0.0] * len(callbacks)

    def __call__(self, stats_json: str) -> None:
        now = time.monotonic()
        for i, (cb, every_ms) in enumerate(self.callbacks):
            if now >= self._due[i]:
                self._due[i] = now + every_ms * 0.9 / 1000  # a document early by a few ms still counts
                cb(stats_json)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChainedStats) and other.callbacks == self.callbacks

    def __hash__(self) -> int:
        return hash(self.callbacks)
