"""The pipeline's crash tests, shared by local mode (tests/test_pipeline_checkpoint.py) and the Spark cluster
(tests/test_pipeline_cluster.py): the streaming driver as its own process, traffic from a traced ykafka Producer,
the checkpoint read from the store, and the store checked strictly against what the broker holds."""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.pipeline_fixtures import unique
from tests.support import ROOT
from ykafka import events

QUERIES = {"trace": events.TRACE_TOPIC, "metrics": events.METRICS_TOPIC}
#: the datasets each query writes, named ``b<batch id>-<name>-<i>.parquet`` (pipeline/store.py)
OUTPUTS = {"trace": ("trace",), "metrics": ("metrics", "aggregates")}


class Driver:
    """``ykafka pipeline run`` (continuous) in its own session: its pid is its process group's id."""

    def __init__(self, bootstrap: str, store: Path, log: Path, master: str = "local[2]",
                 conf: tuple[str, ...] = ()) -> None:
        self.args = [str(Path(sys.executable).parent / "ykafka"), "pipeline", "run", "--master", master,
                     "--no-sampler", "--bootstrap", bootstrap, "--store", str(store), "--trigger-s", "1",
                     "--conf", "spark.sql.shuffle.partitions=2"]
        for item in conf:
            self.args += ["--conf", item]
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Driver:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the driver's process group (by its pid): the Python driver, its JVM and its Python workers."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=15)
        self.proc = None


def checkpoint(store: Path, query: str) -> dict[str, Any]:
    """The query's checkpoint: offsets logged per batch id, committed batch ids."""
    root = store / "_checkpoints" / query
    logged = {int(p.name) for p in (root / "offsets").glob("[0-9]*")} if (root / "offsets").is_dir() else set()
    done = {int(p.name) for p in (root / "commits").glob("[0-9]*")} if (root / "commits").is_dir() else set()
    return {"logged": logged, "committed": done}


def committed_end(store: Path, query: str) -> dict[str, int] | None:
    """``{partition: next offset}`` of the query's topic after its last committed batch."""
    found = checkpoint(store, query)["committed"]
    if not found:
        return None
    lines = (store / "_checkpoints" / query / "offsets" / str(max(found))).read_text().splitlines()
    offsets = json.loads(lines[-1])  # v1, batch metadata, then the source's offsets
    if isinstance(offsets, str):
        offsets = json.loads(offsets)
    return {p: int(o) for p, o in offsets.get(QUERIES[query], {}).items()}


def batch_files(store: Path, query: str, batch_id: int) -> list[Path]:
    return [f for dataset in OUTPUTS[query] for f in (store / dataset).rglob(f"b{batch_id:012d}-*.parquet")]


def ends(bootstrap: str, topic: str) -> dict[str, int]:
    """The topic's real end offsets, as the pipeline's source learns them (``endOffsets=scan``)."""
    from pipeline.source import KafkaStreamReader

    reader = KafkaStreamReader({"bootstrap": bootstrap, "topics": topic})
    try:
        return {p: int(o) for p, o in reader.latestOffset().get(topic, {}).items()}
    finally:
        reader.stop()


def caught_up(bootstrap: str, store: Path) -> bool:
    for query, topic in QUERIES.items():
        done = committed_end(store, query)
        if done is None or any(done.get(p, 0) < end for p, end in ends(bootstrap, topic).items()):
            return False
    return True


def broker_events(bootstrap: str, topic: str, keep: Any) -> list[dict[str, Any]]:
    """Every decoded event of ``topic`` that ``keep`` accepts, read to the end of every partition."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g-truth"), "enable.auto.commit": False,
                  "enable.partition.eof": True, "log_level": 3})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        found: list[dict[str, Any]] = []
        open_parts = set(parts)
        deadline = time.monotonic() + 60
        while open_parts and time.monotonic() < deadline:
            for msg in c.consume(1000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise AssertionError(str(err))
                    open_parts.discard(msg.partition())
                    continue
                found.extend(e for _kind, e in events.iter_events(iter([msg.value()])) if keep(e))
        assert not open_parts, f"did not reach the end of {topic} partitions {open_parts}"
        return found
    finally:
        c.close()


class Traffic:
    """A ykafka Producer sending traced (P0: every message) keyed messages at a steady rate from a thread,
    with its librdkafka statistics (``send.msgs`` per topic) every 500 ms."""

    def __init__(self, bootstrap: str, topic: str, client_id: str, rate: float = 50.0) -> None:
        from ykafka import Producer

        self.topic = topic
        self.rate = rate
        self.producer: Any = Producer({"bootstrap.servers": bootstrap, "topic.grade": "P0",
                                       "ykafka.client.id": client_id, "ykafka.trace.linger.ms": 20,
                                       "ykafka.metrics.interval.ms": 500, "linger.ms": 5})
        self.sent = 0
        self.acked: list[str] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        (self.failed if err is not None else self.acked).append(msg.key().decode())

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                self.producer.produce(self.topic, b"v", f"k{self.sent}".encode(), on_delivery=self._delivered)
                self.sent += 1
            self.producer.poll(0)
            self._stop.wait(0.02)

    def start(self) -> Traffic:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sending, wait for every delivery and for the statistics that count the last messages, close."""
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(30) == 0
        time.sleep(1.5)  # librdkafka's next statistics (every 500 ms) report the last messages sent
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self.producer is not None:
            self.producer.close()
            self.producer = None


def verify_exact(bs: str, store: Path, topic: str, traffic: Traffic) -> dict[str, int]:
    """The store against the broker, strictly: every acknowledged message has exactly one ``acked`` step, every
    trace event of the topic is stored once, and ``send.msgs`` per window equals the producer's metric events."""
    import pyarrow.compute as pc

    from pipeline.aggregates import read_aggregates
    from pipeline.store import Store

    # --- the trace store: each event of the topic exactly once ---------------------------------------------
    truth_trace = broker_events(bs, events.TRACE_TOPIC, lambda e: e.get("topic") == topic)
    st = Store(str(store))
    stored = st.read("trace", [p.relative_to(store / "trace").as_posix()
                               for p in (store / "trace").glob(f"*/*/topic={topic}")]).to_pylist()

    def step(e: dict[str, Any]) -> tuple[Any, ...]:
        return (e.get("key"), e.get("kind"), e.get("ts"), e.get("msg_id"))

    expected_steps = collections.Counter(step(e) for e in truth_trace)
    stored_steps = collections.Counter(step(e) for e in stored)
    acked_keys = collections.Counter(e["key"] for e in stored if e["kind"] == "acked")
    duplicated = {k: n for k, n in acked_keys.items() if n > 1}
    missing = set(traffic.acked) - set(acked_keys)
    assert not duplicated and not missing, (f"acked steps: {len(missing)} missing (e.g. {sorted(missing)[:5]}), "
                                            f"{len(duplicated)} double-counted (e.g. {list(duplicated.items())[:5]})")
    assert len(acked_keys) == len(traffic.acked)
    assert stored_steps == expected_steps, (
        f"trace store vs broker: {sum((expected_steps - stored_steps).values())} missing, "
        f"{sum((stored_steps - expected_steps).values())} extra")

    # --- the aggregates: send.msgs per window of the topic == the producer's metric events -------------------
    truth_metrics = broker_events(bs, events.METRICS_TOPIC,
                                  lambda e: e.get("topic") == topic and e.get("name") == "send.msgs")
    per_window: collections.Counter[int] = collections.Counter()
    for e in truth_metrics:
        per_window[e["ts"] // 60_000 * 60_000] += int(e["count"])
    rows = read_aggregates(str(store), since=dt.timedelta(hours=2), names=["send.msgs"],
                           topic=topic, by=("name", "topic"))
    aggregated = {r["window_start"]: r["count"] for r in rows}
    assert aggregated == dict(per_window), f"aggregates {aggregated} != broker {dict(per_window)}"
    assert sum(aggregated.values()) == traffic.sent  # every message the producer sent, counted once
    # and the metric history: each of the producer's send.msgs events of the topic stored once
    history = st.read("metrics", filter=(pc.field("topic") == topic) & (pc.field("name") == "send.msgs")).to_pylist()

    def sample(e: dict[str, Any]) -> tuple[Any, ...]:
        return (e.get("ts"), e.get("client_id"), e.get("count"))

    assert collections.Counter(sample(e) for e in history) == collections.Counter(sample(e) for e in truth_metrics)
    return {"sent": traffic.sent, "acked_in_store": len(acked_keys), "trace_events": sum(stored_steps.values()),
            "metric_events": len(history), "windows": len(aggregated), "send_msgs": sum(aggregated.values())}
