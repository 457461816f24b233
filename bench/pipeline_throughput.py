"""Pipeline throughput on Spark ``local[2]``: events per second through the trace and aggregate jobs, and the
time from an event to its alert.

1. Warm-up: 16,000 events through both jobs (the first micro-batch of a Spark process pays JVM
   code generation, JIT and Python worker start-up; reported as ``warmup_s``).
2. Writes ``--events`` trace events (messages' produced / acked / consumed / processed steps) and a tenth as
   many metric events to a private Tansu broker through the SDK's own EventSink, runs the trace-store and
   metrics/aggregate queries (``availableNow``, continuing from the warm-up's checkpoints) and divides the
   events by the wall time (planning, reading, parsing, writing, checkpoint commits).
3. Starts the pipeline continuously (1 s triggers, alert evaluation every second), feeds it ~4,000 trace events
   a second for ``--trickle-s`` (``continuous``: the trace query's micro-batches a minute and the CPU a second over
   the second half; a standing query's fixed cost a batch decides how fresh the stores are), then writes one
   metric event whose handler latency breaks a rule and measures until the alert is delivered.

    python bench/pipeline_throughput.py [--events 200000] [--master local[2]] [--conf k=v ...] [--batches N]
        [--source python|jvm] [--trickle-s 60] [--broker tansu|kafka] [--quick]
    python bench/pipeline_throughput.py --cluster [--events 200000] [--quick]

``--cluster`` runs the same measurement three times, each in its own driver process, in one run: on
``local[2]``, on a standalone cluster of two workers (one core, 512 MB each; ``pipeline.cluster``, what
``ykafka pipeline cluster up`` starts) and on the same cluster with a third worker added, and reports the three
side by side (``by_master``) with the cluster's ratio to local mode.

The measured batch's CPU time is read from ``/proc`` (this process and its descendants: the Spark JVM and its
Python workers; the broker apart): ``cpu_s``, ``cpu_s_per_1k_events`` (what the figure costs, comparable between
runs on a loaded machine where events/s is not), ``jit_cpu_s`` (the JVM's JIT compiler threads, part of
``cpu_s``), ``broker_cpu_s`` and the load average before and after (``load``).

Last line: RESULT {"events", "events_s", "event_to_alert_s", "cpu_s_per_1k_events", ...}
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.runner import Pipeline, PipelineConfig  # noqa: E402
from pipeline.session import DEFAULT_CONF, spark_session  # noqa: E402
from tests.support import Broker  # noqa: E402
from ykafka import events  # noqa: E402
from ykafka.events import MetricName  # noqa: E402
from ykafka.sink import EventSink  # noqa: E402

KINDS = ("produced", "acked", "consumed", "processed")
TICK = os.sysconf("SC_CLK_TCK")


def _stat(path: str) -> list[str]:
    """The fields of a /proc stat file after the command name (which may hold spaces)."""
    with open(path) as f:
        text = f.read()
    return text[text.rfind(")") + 2:].split()


def cpu_seconds(root: int, apart: set[int]) -> dict[str, float]:
    """CPU seconds (user + system, with reaped children's) of ``root`` and its descendants, those under a pid of
    ``apart`` counted as ``apart``; ``jit``: the JIT compiler threads of every Java process among them."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent[int(entry)] = int(_stat(f"/proc/{entry}/stat")[1])
            except (OSError, IndexError, ValueError):
                continue
    out = {"tree": 0.0, "apart": 0.0, "jit": 0.0}
    for pid in parent:
        node, key = pid, ""
        while node > 1 and not key:
            key = "apart" if node in apart else "tree" if node == root else ""
            node = parent.get(node, 0)
        if not key:
            continue
        try:
            fields = _stat(f"/proc/{pid}/stat")
            out[key] += sum(int(x) for x in fields[11:15]) / TICK
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/comm") as f:
                    if "CompilerThre" in f.read():
                        out["jit"] += sum(int(x) for x in _stat(f"/proc/{pid}/task/{task}/stat")[11:13]) / TICK
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
    return out


def put_steps(put: Any, i: int, at: int, mid: str) -> None:
    """Message ``i``'s four trace steps (:data:`KINDS`), from ``at`` on, one row each."""
    for step, kind in enumerate(KINDS):
        put((at + step, kind, mid, f"topic-{i % 8}", f"key-{i}", i % 4, i, at, 1.5 if step else None,
             "g1" if step >= 2 else None, None, None, None, "dc-a"))


def write_events(bootstrap: str, trace_events: int, prefix: str = "m") -> tuple[int, int]:
    sink = EventSink({"bootstrap.servers": bootstrap, "linger.ms": 50}, queue_max=10_000_000)
    put_trace = sink.channel("trace", {"client_id": "bench-1", "app": "bench", "ip": "10.0.0.1"}).put
    now = events.now_ms() - 60_000
    messages = trace_events // len(KINDS)
    for i in range(messages):
        put_steps(put_trace, i, now + i // 100, f"{prefix}{i:09d}")
    metrics = trace_events // 10
    for i in range(metrics):
        sink.put("metric", events.row("metric", {
            "ts": now + i % 60_000, "name": str(MetricName.CONSUME_LATENCY if i % 2 else MetricName.SEND_LATENCY),
            "client_id": f"c{i % 50}", "topic": f"topic-{i % 8}", "group": "g1", "count": 100, "sum": 500.0,
            "max": 20.0, "p50": 4.0, "p95": 9.0, "p99": 15.0, "source": "stats"}))
    left = sink.flush(120)
    stats = sink.stats()
    sink.close()
    if left or stats["trace"]["delivered"] != messages * len(KINDS) or stats["metric"]["delivered"] != metrics:
        raise RuntimeError(f"events not all delivered: {stats}")
    return messages * len(KINDS), metrics


def trickle(pipeline: Pipeline, broker: Broker, seconds: float, apart: set[int]) -> dict[str, Any]:
    """The running pipeline under a steady trickle: how often each query's micro-batch comes round (a standing
    query's fixed cost a batch: its cadence is how fresh the stores are) and what the whole costs a second."""
    stop = threading.Event()
    sent = [0]

    def feed() -> None:
        sink = EventSink({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
        put = sink.channel("trace", {"client_id": "bench-2", "app": "bench", "ip": "10.0.0.1"}).put
        i = 0
        while not stop.is_set():
            now = events.now_ms()
            for _ in range(100):
                put_steps(put, i, now, f"t{i:09d}")
                i += 1
            sent[0] = i * len(KINDS)
            time.sleep(0.1)
        sink.flush(30)
        sink.close()

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        time.sleep(seconds / 2)  # queries settle into the trickle's cadence
        batches = pipeline.stats["trace"].batches
        cpu, events_before, started = cpu_seconds(os.getpid(), apart), sent[0], time.monotonic()
        time.sleep(seconds / 2)
        elapsed = time.monotonic() - started
        used = cpu_seconds(os.getpid(), apart)
        return {"events_s": round((sent[0] - events_before) / elapsed),
                "trace_batches_per_min": round((pipeline.stats["trace"].batches - batches) * 60 / elapsed, 1),
                "cpu_s_per_s": round((used["tree"] - cpu["tree"]) / elapsed, 3),
                "jit_cpu_s_per_s": round((used["jit"] - cpu["jit"]) / elapsed, 3)}
    finally:
        stop.set()
        feeder.join(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000, help="trace events (plus 10%% metric events)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[], help="extra Spark setting key=value")
    parser.add_argument("--quick", action="store_true", help="8,000 events (the suite's check)")
    parser.add_argument("--batches", type=int, default=1,
                        help="measured batches of --events each (the first is the headline figure; the later ones, "
                             "in later_batches, show a long-lived pipeline's cost once the JIT has compiled)")
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu",
                        help="the source cluster: Tansu (memory) or one Apache Kafka KRaft node")
    parser.add_argument("--source", choices=["python", "jvm"], default="python",
                        help="the pipeline's Kafka reader: ykafka-kafka (Python workers) or Spark's own kafka source "
                             "(its jar on the classpath, e.g. --conf spark.jars.packages=...)")
    parser.add_argument("--trickle-s", type=float, default=60.0,
                        help="seconds of the continuous pipeline (1 s triggers) under a trickle of ~4,000 events/s; "
                             "the second half is measured (micro-batches a minute, CPU a second)")
    parser.add_argument("--jvm", choices=["c1", "c2"], default="c1",
                        help="the driver JVM's compilers: C1 only, as the pipeline starts it (pipeline.session), or "
                             "the JVM's default tiered C1 + C2, to compare")
    parser.add_argument("--cluster", action="store_true",
                        help="local[2], then a 2-worker standalone cluster, then 3 workers, in one run")
    args = parser.parse_args()
    if args.quick:
        args.events = 8_000
        args.trickle_s = min(args.trickle_s, 12.0)
    if args.cluster:
        compare_on_cluster(args.events)
        return
    conf = dict(item.split("=", 1) for item in args.conf)
    if args.jvm == "c2":
        conf.setdefault("spark.driver.extraJavaOptions",
                        DEFAULT_CONF["spark.driver.extraJavaOptions"].replace("-XX:TieredStopAtLevel=1", "").strip())
    work = Path(tempfile.mkdtemp(prefix="ykafka-bench-pipeline-"))
    broker = Broker("bench-pipeline", work / "logs", broker=args.broker).start()
    pipeline: Pipeline | None = None
    try:
        # 16 event batches: the warm-up is read in two tasks as the measured batch is (two Python workers)
        warm_n = sum(write_events(broker.bootstrap, 16_000, prefix="w"))
        started = time.monotonic()
        spark = spark_session(args.master, conf)
        spark_start_s = time.monotonic() - started
        cfg = PipelineConfig(
            bootstrap=broker.bootstrap, store=str(work / "store"), master=args.master, sample_lag=False,
            spark_conf=conf, source=args.source,
            trigger_s=1.0, eval_interval_s=1.0,
            alert_overrides={"window_s": 120, "latency": [
                {"name": "slow-handler", "metric": "process.latency_ms", "stat": "p95", "threshold_ms": 1000}],
                "error_rate": [], "lag": {}, "audit": {}, "sinks": {"kafka": True}})
        pipeline = Pipeline(cfg, spark=spark)

        handled: dict[str, float] = {}

        def once() -> float:
            assert pipeline is not None
            started = time.monotonic()
            before = {name: q.seconds for name, q in pipeline.stats.items()}
            pipeline.process_available(("trace", "metrics"))  # side by side, as run_once and continuous mode
            # time spent in each query's micro-batch handler (parse + write), overlapping the other's
            handled.update({name: round(pipeline.stats[name].seconds - before[name], 2) for name in before})
            return time.monotonic() - started

        warmup_s = once()  # first batch: JVM code generation and JIT, Python workers start
        print(f"warm-up: {warm_n} events in {warmup_s:.1f}s", flush=True)
        apart = {pid for pid in broker.pids if pid}
        later: list[dict[str, Any]] = []  # --batches: the same batch again, JIT and caches warmer each time
        for batch in range(args.batches):
            trace_n, metric_n = write_events(broker.bootstrap, args.events, prefix="m" if batch == 0 else f"m{batch}-")
            load_before = os.getloadavg()[0]
            cpu_before = cpu_seconds(os.getpid(), apart)
            elapsed = once()
            cpu = {k: v - cpu_before[k] for k, v in cpu_seconds(os.getpid(), apart).items()}
            load_after = os.getloadavg()[0]
            stored = pipeline.store.read("trace").num_rows
            if stored != (batch + 1) * trace_n + 16_000:
                raise RuntimeError(f"trace store holds {stored} rows, expected {(batch + 1) * trace_n + 16_000}")
            print(f"{trace_n + metric_n} events in {elapsed:.1f}s ({cpu['tree']:.1f} CPU-s, JIT {cpu['jit']:.1f}; "
                  f"load {load_before:.1f}-{load_after:.1f}); in micro-batch handlers: "
                  + ", ".join(f"{n} {handled[n]:.1f}s" for n in ("trace", "metrics")), flush=True)
            if batch == 0:
                first = (elapsed, cpu, load_before, load_after, dict(handled))
            else:
                later.append({"events_s": round((trace_n + metric_n) / elapsed),
                              "cpu_s_per_1k_events": round(cpu["tree"] * 1000 / (trace_n + metric_n), 4),
                              "jit_cpu_s": round(cpu["jit"], 2), "load": [round(load_before, 1), round(load_after, 1)]})
        elapsed, cpu, load_before, load_after, handled = first

        runner = threading.Thread(target=pipeline.run, daemon=True)
        runner.start()
        time.sleep(3)  # queries started and idle
        continuous = trickle(pipeline, broker, args.trickle_s, apart)
        print(f"continuous: {continuous}", flush=True)
        sink = EventSink({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        sent_at = time.monotonic()
        sink.put("metric", events.row("metric", {
            "ts": events.now_ms(), "name": str(MetricName.PROCESS_LATENCY), "client_id": "slow-1",
            "topic": "slow-topic", "group": "g-slow", "count": 10, "sum": 50_000.0, "max": 6000.0,
            "p50": 5000.0, "p95": 5500.0, "p99": 6000.0, "source": "timer"}))
        sink.flush(10)
        alert: dict[str, Any] | None = None
        deadline = time.monotonic() + 120
        while alert is None and time.monotonic() < deadline:
            alert = next((a for a in list(pipeline.alerts.sent) if a["topic"] == "slow-topic"), None)
            time.sleep(0.1)
        event_to_alert = time.monotonic() - sent_at
        sink.close()
        pipeline.stop()
        runner.join(30)
        if alert is None:
            raise RuntimeError("no alert within 120 s")
        print(f"alert after {event_to_alert:.1f}s: {alert['reason']}", flush=True)
        result = {"events": trace_n + metric_n, "events_s": round((trace_n + metric_n) / elapsed),
                  "event_to_alert_s": round(event_to_alert, 2), "trace_events": trace_n, "metric_events": metric_n,
                  "batch_seconds": round(elapsed, 2), "spark_start_s": round(spark_start_s, 1),
                  "warmup_s": round(warmup_s, 1), "handler_seconds": {n: handled[n] for n in ("trace", "metrics")},
                  "cpu_s": round(cpu["tree"], 2),
                  "cpu_s_per_1k_events": round(cpu["tree"] * 1000 / (trace_n + metric_n), 4),
                  "jit_cpu_s": round(cpu["jit"], 2), "broker_cpu_s": round(cpu["apart"], 2),
                  "load": [round(load_before, 1), round(load_after, 1)],
                  "continuous": continuous, "master": args.master, "broker": args.broker, "source": args.source,
                  "jvm": args.jvm,
                  **({"later_batches": later} if later else {})}
    finally:
        if pipeline is not None:
            pipeline.close()
        broker.close()
    print("RESULT " + json.dumps(result))


def _measure(events_n: int, master: str, conf: tuple[str, ...] = ()) -> dict[str, Any]:
    """One measurement in its own driver process (a SparkSession is per process)."""
    args = [sys.executable, __file__, "--events", str(events_n), "--master", master]
    for item in conf:
        args += ["--conf", item]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{master}: exit {proc.returncode}\n{(proc.stdout + proc.stderr)[-2000:]}")
    print(f"{master}: {lines[-1]}", flush=True)
    return dict(json.loads(lines[-1][len("RESULT "):]))


def compare_on_cluster(events_n: int) -> None:
    from pipeline import cluster

    home = Path(tempfile.mkdtemp(prefix="ykafka-bench-spark-"))
    conf = ("spark.driver.host=127.0.0.1", "spark.executor.memory=512m")
    by_master: dict[str, dict[str, Any]] = {"local[2]": _measure(events_n, "local[2]",
                                                                   ("spark.sql.shuffle.partitions=2",))}
    try:
        spark = cluster.up(home, workers=2, cores=1, memory="512m")
        by_master["cluster-2-workers"] = _measure(events_n, spark.master,
                                                  (*conf, "spark.sql.shuffle.partitions=2", "spark.cores.max=2"))
        cluster.add_worker(spark, cores=1, memory="512m")
        by_master["cluster-3-workers"] = _measure(events_n, spark.master,
                                                  (*conf, "spark.sql.shuffle.partitions=3", "spark.cores.max=3"))
    finally:
        cluster.down(home)
    local = by_master["local[2]"]["events_s"]
    result = {"events": by_master["local[2]"]["events"], "cores": os.cpu_count(),
              "by_master": {name: {k: r[k] for k in ("events_s", "event_to_alert_s", "batch_seconds",
                                                      "spark_start_s", "warmup_s")}
                            for name, r in by_master.items()},
              "cluster2_vs_local": round(by_master["cluster-2-workers"]["events_s"] / local, 3),
              "cluster3_vs_cluster2": round(by_master["cluster-3-workers"]["events_s"]
                                            / by_master["cluster-2-workers"]["events_s"], 3)}
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
