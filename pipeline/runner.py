"""The pipeline: three streaming queries over the SDK's topics, plus lag sampling, alerts and inventory.

* ``trace``   — ``__ykafka_trace``   -> trace store;
* ``metrics`` — ``__ykafka_metrics`` -> metric history (incl. lag samples) + windowed aggregates;
* ``clients`` — ``__ykafka_clients`` -> client history + real-time deletion of ephemeral groups.

Each query also reads every app's own topic of its kind (``__ykafka_trace.<app>``: on a secured cluster an app
writes only there, ``ykafka.events.app_topic``), found by prefix as apps appear, and attributes each event to
the app its topic belongs to; an event claiming another app is left out, counted and alerted
(``telemetry.forged``, :mod:`pipeline.decode`).

After micro-batches (``--once``: after all of them; continuously: every ``eval_interval_s``) the alert
rules run over the store and new / resolved alerts are delivered. The lag sampler writes the broker's
view of every group into ``__ykafka_metrics`` every ``sample_interval_s`` (and once before a ``--once``
run). Offsets live in Spark checkpoints under the store, so re-running continues where the last run ended.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from ykafka import events

from . import aggregates, audit, groups, inventory, trace_store
from .alerts import Alert, AlertConfig, AlertManager, error_rate_alerts, lag_alerts, latency_alerts
from .decode import decode, drop_forged, unpack, with_time_partitions
from .lag_sampler import LagSampler
from .session import spark_session
from .store import Store, days_between

log = structlog.get_logger(__name__)
# what Spark says when a Python worker it started did not connect back within its fixed 10 s
WORKER_TIMEOUT = "Python worker failed to connect back"
#: how often continuous mode restarts one query after such a failure before giving up
MAX_WORKER_RESTARTS = 5

Progress = Callable[[str, dict[str, Any]], None]

#: fewest Kafka records (each a batch of up to 1,000 events) a read task gets when a range is split
MIN_RECORDS_PER_TASK = 8
#: the kind of events each query reads (its shared topic: ``events.TOPICS``)
KINDS = {"trace": "trace", "metrics": "metric", "clients": "client"}


@dataclass
class PipelineConfig:
    bootstrap: str
    store: str = ".ykafka/pipeline"
    master: str | None = None
    cluster: str = ""
    alerts_path: str | None = None
    alert_overrides: dict[str, Any] = field(default_factory=dict)
    trigger_s: float = 2.0
    max_offsets_per_trigger: int | None = None
    #: read each micro-batch in at least this many tasks (None: Spark's default parallelism, e.g. 2 on
    #: local[2]); a range is cut only into parts of at least MIN_RECORDS_PER_TASK records (event batches)
    min_partitions: int | None = None
    end_offsets: str = "scan"
    #: "python": the ykafka-kafka source (no jar); "jvm": Spark's own kafka source, when its jar
    #: (spark-sql-kafka-0-10) is on the classpath (e.g. --conf spark.jars.packages=...)
    source: str = "python"
    sample_lag: bool = True
    sample_interval_s: float = 10.0
    eval_interval_s: float = 5.0
    aggregate_window_s: int = aggregates.WINDOW_S
    ephemeral_patterns: tuple[str, ...] = ()
    client_heartbeat_s: float = 180.0
    spark_conf: dict[str, str] = field(default_factory=dict)
    kafka_conf: dict[str, Any] = field(default_factory=dict)


@dataclass
class QueryStats:
    batches: int = 0
    rows: int = 0
    seconds: float = 0.0
    last_batch: int = -1


class Pipeline:
    """One pipeline process (see the module docstring)."""

    #: (query, the shared topic it reads)
    QUERIES = tuple((name, events.TOPICS[kind]) for name, kind in KINDS.items())

    def __init__(self, cfg: PipelineConfig, spark: Any = None, progress: Progress | None = None) -> None:
        from confluent_kafka import Producer

        self.cfg = cfg
        self.store = Store(cfg.store)
        self.spark = spark or spark_session(cfg.master, cfg.spark_conf)
        self.alert_cfg = AlertConfig.load(cfg.alerts_path, cfg.alert_overrides)
        self.producer = Producer({"bootstrap.servers": cfg.bootstrap, "linger.ms": 5, "log_level": 3,
                                  **cfg.kafka_conf})
        self.sampler = LagSampler(cfg.bootstrap, cfg.cluster, conf=cfg.kafka_conf) if cfg.sample_lag else None
        self.alerts = AlertManager(self.store, self.alert_cfg, self.producer, cfg.cluster)
        self.stats = {name: QueryStats() for name, _ in self.QUERIES}
        self.ephemeral_actions: dict[str, str | None] = {}
        self.progress = progress
        self._queries: list[Any] = []
        self._stop = threading.Event()
        #: events dropped as forged, per (query, the topic's app, the app they claimed)
        self.forged: dict[tuple[str, str, str], int] = {}
        self._forged_lock = threading.Lock()

    # --- micro-batch handlers (run on the driver, one per query) ---------------------------------------

    def _timed(self, name: str, batch_id: int, work: Callable[[], int]) -> None:
        started = time.monotonic()
        rows = work()
        stats = self.stats[name]
        stats.batches += 1
        stats.rows += rows
        stats.seconds += time.monotonic() - started
        stats.last_batch = batch_id
        if self.progress is not None:
            self.progress(name, {"batch": batch_id, "rows": rows, "total_rows": stats.rows,
                                 "seconds": round(time.monotonic() - started, 2)})

    def on_forged(self, query: str, found: dict[tuple[str, str], int]) -> None:
        """Events read from app A's own telemetry topic that claim to be app B's (``decode.drop_forged``): left
        out of the store, counted (:attr:`forged`), logged, and alerted at the next evaluation."""
        with self._forged_lock:
            for (owner, claimed), count in found.items():
                self.forged[(query, owner, claimed)] = self.forged.get((query, owner, claimed), 0) + count
        for (owner, claimed), count in sorted(found.items()):
            log.error("ykafka.pipeline.telemetry_forged", query=query, app=owner, claimed_app=claimed, events=count)

    def forged_alerts(self) -> list[Alert]:
        """One ERR alert per (app, claimed app, query) that ever sent forged events, with the count so far."""
        with self._forged_lock:
            counts = dict(self.forged)
        return [Alert("telemetry.forged", "ERR",
                      f"app {owner!r} wrote {count} {query} event(s) claiming to be app {claimed!r} on its own "
                      f"telemetry topic; left out", {"app": owner, "claimed_app": claimed, "query": query,
                                                      "events": count}, extra_subject=f"{query}:{owner}:{claimed}")
                for (query, owner, claimed), count in sorted(counts.items())]

    # Each query's frame is packed (``decode.PACKED_DDL``): its source decodes the SDK's batches in the executors'
    # Python workers and hands Spark one row an Arrow IPC stream of up to 50,000 typed events. A handler collects
    # that and opens it (:meth:`events`): the events cross the JVM as a few blobs, not as 18-column rows converted
    # to Spark's and back to Arrow (on Kafka 220,000 events took 0.092 CPU-s a 1,000 decoded by Spark, 0.039
    # decoded here and carried as rows, ~0.03 packed; issue 39, docs/benchmarks.md).

    @staticmethod
    def events(name: str, packed: Any) -> Any:
        """The typed events (an Arrow table) of a query's micro-batch, from its packed frame."""
        import pyarrow.compute as pc

        table = unpack(KINDS[name], packed.toArrow())
        if name == "trace":  # the store's partition column: never null
            return table.set_column(table.schema.get_field_index("topic"), "topic",
                                    pc.fill_null(table.column("topic"), "_unknown"))
        if name == "clients":
            return with_time_partitions(table, hour=False)
        return table

    def on_trace(self, packed: Any, batch_id: int) -> None:
        self._timed("trace", batch_id, lambda: trace_store.write_batch(
            self.store, self.events("trace", packed), batch_id, lambda found: self.on_forged("trace", found)))

    def on_metrics(self, packed: Any, batch_id: int) -> None:
        def work() -> int:
            # one Spark job: the batch collected once; the aggregates' partials are grouped from the same Arrow
            # table (pyarrow), not by a second job over a cached copy (issue 39)
            table, found = drop_forged(with_time_partitions(self.events("metrics", packed)))
            if found:
                self.on_forged("metrics", found)
            rows = self.store.write(table, "metrics", ["date", "hour"], batch_id, "metrics")
            aggregates.write_batch(self.store, table, batch_id, self.cfg.aggregate_window_s)
            return rows

        self._timed("metrics", batch_id, work)

    def on_clients(self, packed: Any, batch_id: int) -> None:
        def work() -> int:
            table, found = drop_forged(self.events("clients", packed))
            if found:
                self.on_forged("clients", found)
            rows = self.store.write(table, "clients", ["date"], batch_id, "clients")
            closing = groups.ephemeral_closures(table.to_pylist(), self.cfg.ephemeral_patterns)
            if closing and self.sampler is not None:
                self.ephemeral_actions.update(groups.delete_ephemeral(
                    self.sampler, self.store, closing, heartbeat=dt.timedelta(seconds=self.cfg.client_heartbeat_s)))
            return rows

        self._timed("clients", batch_id, work)

    # --- queries ------------------------------------------------------------------------------------

    def _start(self, name: str, topic: str, once: bool) -> Any:
        # the shared topic and every app's own (``__ykafka_trace.<app>``, a secured cluster's), as they appear
        own = f"{topic}{events.TELEMETRY_SEPARATOR}"
        if self.cfg.source == "jvm":
            reader = (self.spark.readStream.format("kafka").option("kafka.bootstrap.servers", self.cfg.bootstrap)
                      .option("subscribePattern", f"{re.escape(topic)}|{re.escape(own)}.+")
                      .option("startingOffsets", "earliest").option("failOnDataLoss", "false"))
        elif self.cfg.source == "python":
            reader = (self.spark.readStream.format("ykafka-kafka").option("bootstrap", self.cfg.bootstrap)
                      .option("topics", f"{topic},{own}*").option("startingOffsets", "earliest")
                      .option("endOffsets", self.cfg.end_offsets).option("decode", KINDS[name]))
        else:
            raise ValueError(f"source must be python or jvm, not {self.cfg.source!r}")
        tasks = self.cfg.min_partitions or self.spark.sparkContext.defaultParallelism
        reader = reader.option("minPartitions", str(tasks))
        if self.cfg.source == "python":
            reader = reader.option("minRecordsPerPartition", str(MIN_RECORDS_PER_TASK))
        for key, value in self.cfg.kafka_conf.items():
            reader = reader.option(f"kafka.{key}", str(value))
        if self.cfg.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(self.cfg.max_offsets_per_trigger))
        handle: Callable[[Any, int], None] = {"trace": self.on_trace, "metrics": self.on_metrics,
                                              "clients": self.on_clients}[name]
        frame = reader.load()
        if self.cfg.source == "jvm":
            frame = decode(frame, KINDS[name])
        writer = (frame.writeStream.queryName(f"ykafka-{name}").foreachBatch(handle)
                  .option("checkpointLocation", self.store.uri("_checkpoints", name)))
        writer = writer.trigger(availableNow=True) if once else writer.trigger(
            processingTime=f"{int(self.cfg.trigger_s * 1000)} milliseconds")
        return writer.start()

    def run_once(self, evaluate: bool = True, build_inventory: bool = True) -> dict[str, Any]:
        """Sample lag, process everything available on the three topics, evaluate alerts, build the inventory."""
        started = time.monotonic()
        if self.sampler is not None:
            self.sample_lag()
        self.process_available()
        delivered = self.evaluate() if evaluate else []
        clients = inventory.build(self.spark, self.store) if build_inventory else []
        return {"seconds": round(time.monotonic() - started, 2), "alerts": delivered, "inventory": clients,
                "queries": {n: vars(s) for n, s in self.stats.items()}, "ephemeral": dict(self.ephemeral_actions),
                "forged": {"/".join(k): v for k, v in sorted(self.forged.items())}}

    def process_available(self, names: tuple[str, ...] | None = None) -> None:
        """Process what the topics hold now (``names``: some of the queries; default all), the queries side
        by side as in continuous mode: one query's start-up and planning overlap the others' work.

        A query whose Python worker did not connect back in time (Spark waits 10 s, not configurable; seen on
        a loaded machine) runs once more: it resumes from its checkpoint, and the store's writes are
        idempotent per batch (docs/observability.md, "Crash and restart")."""
        wanted = [(name, topic) for name, topic in self.QUERIES if names is None or name in names]
        for attempt in (1, 2):
            failed = self._await_queries([(name, self._start(name, topic, once=True)) for name, topic in wanted])
            if not failed:
                return
            name, exc = failed[0]
            if attempt == 2 or WORKER_TIMEOUT not in str(exc):
                raise exc
            log.warning("pipeline.query_retried", query=name, reason=WORKER_TIMEOUT)
            wanted = [(n, t) for n, t in wanted if n in {f for f, _ in failed}]

    @staticmethod
    def _await_queries(queries: list[tuple[str, Any]]) -> list[tuple[str, Exception]]:
        """Wait for every query; the ones that failed, with their exceptions."""
        failed: list[tuple[str, Exception]] = []
        try:
            for name, query in queries:
                try:
                    query.awaitTermination()
                except Exception as exc:  # StreamingQueryException: the caller decides
                    failed.append((name, exc))
        finally:
            for _, query in queries:
                if query.isActive:
                    query.stop()
        return failed

    def start(self) -> None:
        """Start the three continuous queries (returns at once)."""
        self._queries = [self._start(name, topic, once=False) for name, topic in self.QUERIES]

    def run(self, duration_s: float | None = None) -> None:
        """Run continuously: queries + lag sampling + alert evaluation, until :meth:`stop` or ``duration_s``."""
        self.start()
        restarts: dict[str, int] = {}
        deadline = None if duration_s is None else time.monotonic() + duration_s
        next_sample = next_eval = time.monotonic()
        try:
            while not self._stop.is_set() and (deadline is None or time.monotonic() < deadline):
                now = time.monotonic()
                if self.sampler is not None and now >= next_sample:
                    self.sample_lag()
                    next_sample = now + self.cfg.sample_interval_s
                if now >= next_eval:
                    self.evaluate()
                    next_eval = now + self.cfg.eval_interval_s
                self._restart_or_raise(restarts)
                self._stop.wait(0.2)
        finally:
            self.stop()

    def _restart_or_raise(self, restarts: dict[str, int]) -> None:
        """A continuous query that failed because a Python worker did not connect back in time (transient: a
        loaded host) is started again from its checkpoint, up to ``MAX_WORKER_RESTARTS`` times; any other
        failure ends the run."""
        for index, (name, topic) in enumerate(self.QUERIES[:len(self._queries)]):
            exc = self._queries[index].exception()
            if exc is None:
                continue
            if WORKER_TIMEOUT not in str(exc) or restarts.get(name, 0) >= MAX_WORKER_RESTARTS:
                raise RuntimeError(f"query {self._queries[index].name} failed: {exc}")
            restarts[name] = restarts.get(name, 0) + 1
            backoff = 2.0 ** restarts[name]  # give a loaded host time to settle: 2, 4, 8 ... s
            log.warning("pipeline.query_restarted", query=name, reason=WORKER_TIMEOUT, restarts=restarts[name],
                        after_s=backoff)
            if self._stop.wait(backoff):
                return
            self._queries[index] = self._start(name, topic, once=False)

    def stop(self) -> None:
        self._stop.set()
        for query in self._queries:
            try:
                query.stop()
            except Exception as exc:
                log.warning("ykafka.pipeline.stop_failed", query=query.name, error=str(exc))
        self._queries = []

    # --- periodic work -------------------------------------------------------------------------------

    def sample_lag(self) -> list[dict[str, Any]]:
        assert self.sampler is not None
        try:
            samples = self.sampler.sample(expected=self._expected_topics())
            self.sampler.publish(self.producer, samples)
            self.producer.flush(10)
            return samples
        except Exception as exc:
            log.warning("ykafka.pipeline.sample_failed", error=str(exc))
            return []

    def _expected_topics(self) -> dict[str, list[str]]:
        """group -> topics its consumers reported (client events of the last day)."""
        import pyarrow.compute as pc

        now = dt.datetime.now(dt.UTC)
        start = now - dt.timedelta(days=1)
        table = self.store.read("clients", [f"date={d}" for d in days_between(start, now)],
                                filter=(pc.field("role") == "consumer") & pc.field("group").is_valid(),
                                columns=["group", "topics"])
        out: dict[str, set[str]] = {}
        for row in table.to_pylist():
            for topic in (row["topics"] or "").split(","):
                if topic.strip() and not topic.startswith("^"):
                    out.setdefault(row["group"], set()).add(topic.strip())
        return {g: sorted(t) for g, t in out.items()}

    def evaluate(self, now: dt.datetime | None = None) -> list[dict[str, Any]]:
        """Run every rule over the store; deliver new and resolved alerts; returns what was delivered."""
        now = now or dt.datetime.now(dt.UTC)
        cfg = self.alert_cfg
        current = latency_alerts(self.store, cfg, now) + error_rate_alerts(self.store, cfg, now) + lag_alerts(
            self.store, cfg, now)
        judged = [r["name"] for r in cfg.latency] + [r["name"] for r in cfg.error_rate]
        if cfg.lag:
            judged.append(cfg.lag.get("name", "consumer-lag"))
        delivered = self.alerts.process(current, judged, now)
        delivered += self.alerts.process(audit.loss_alerts(self.store, cfg, now), [], now)
        delivered += self.alerts.process(self.forged_alerts(), [], now)
        return delivered

    def close(self) -> None:
        self.stop()
        if self.sampler is not None:
            self.sampler.close()
        self.producer.flush(5)
