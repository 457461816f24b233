"""Metrics: librdkafka statistics of real clients -> metric events; timings; Prometheus; client events."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
import requests
from confluent_kafka import Producer, TopicPartition

from tests.helpers import create_topic
from tests.pipeline_fixtures import consumer, read_events, unique, wait_until
from tests.support import ROOT, brokers, free_port
from ykafka import events
from ykafka.events import MetricName
from ykafka.metrics import Metrics, client_event_from_report, local_versions
from ykafka.sink import EventSink

# consumer lag from a real group's committed offsets and watermarks: Apache Kafka
pytestmark = pytest.mark.broker("kafka")


def test_timer_summaries_and_counters_are_exact() -> None:
    metrics = Metrics(None, "c-1", "consumer", group="g1", interval_s=3600)
    for ms in range(1, 101):
        metrics.observe(MetricName.PROCESS_LATENCY, float(ms), topic="orders", group="g1")
    metrics.count(MetricName.CONSUME_ERRORS, 3, topic="orders", group="g1")
    out = {e["name"]: e for e in metrics.flush_timers()}
    timing = out[MetricName.PROCESS_LATENCY]
    assert (timing["count"], timing["sum"], timing["max"], timing["p50"], timing["p95"], timing["p99"]) == (
        100, 5050.0, 100.0, 50.0, 95.0, 99.0)
    assert (timing["topic"], timing["group"], timing["source"]) == ("orders", "g1", "timer")
    assert out[MetricName.CONSUME_ERRORS]["value"] == 3.0
    assert metrics.flush_timers() == []  # the interval was reset
    metrics.close(final_state=None)


def test_batched_samples_match_one_by_one_counts_and_fill_the_reservoir_uniformly() -> None:
    metrics = Metrics(None, "c-3", "consumer", group="g1", interval_s=3600)
    values = [float(v) for v in range(1, 20_001)]
    for start in range(0, len(values), 7):  # worker batches, crossing the reservoir's edge mid-batch
        metrics.observe_many(MetricName.CONSUME_LATENCY, values[start:start + 7], topic="orders", group="g1")
    metrics.observe_many(MetricName.CONSUME_LATENCY, [], topic="orders", group="g1")
    timing = {e["name"]: e for e in metrics.flush_timers()}[MetricName.CONSUME_LATENCY]
    assert (timing["count"], timing["sum"], timing["max"]) == (20_000, 200_010_000.0, 20_000.0)
    assert 8_000 <= timing["p50"] <= 12_000  # a uniform sample of 1..20,000, not the first batches
    assert timing["p99"] >= 18_000
    metrics.close(final_state=None)


def test_timer_samples_from_worker_threads_are_all_counted_across_flushes() -> None:
    """Worker threads observe while the report thread flushes: every sample lands in exactly one interval."""
    metrics = Metrics(None, "c-2", "consumer", group="g1", interval_s=3600)
    threads, per_thread = 4, 20_000
    flushed: list[dict] = []
    done = threading.Event()

    def work() -> None:
        for _ in range(per_thread):
            metrics.observe(MetricName.PROCESS_LATENCY, 1.0, topic="orders", group="g1")

    def flush() -> None:
        while not done.is_set():
            flushed.extend(metrics.flush_timers())

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: a lost update would show
    try:
        flusher = threading.Thread(target=flush)
        flusher.start()
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        done.set()
        flusher.join()
    finally:
        sys.setswitchinterval(old)
    flushed.extend(metrics.flush_timers())
    assert sum(e["count"] for e in flushed) == threads * per_thread
    assert sum(e["sum"] for e in flushed) == threads * per_thread
    metrics.close(final_state=None)


def test_producer_statistics_give_send_latency_and_exact_message_counts(obs_broker) -> None:
    topic = unique("stats")
    metrics = Metrics(None, "p-1", "producer", cluster="dc-a", interval_s=0.2)
    seen: list[dict] = []
    original = metrics.ingest
    metrics.ingest = lambda stats: seen.extend(original(stats)) or []  # type: ignore[method-assign]
    producer = Producer({"bootstrap.servers": obs_broker.bootstrap, "linger.ms": 0, **metrics.rdkafka_settings()})
    for i in range(20):
        producer.produce(topic, f"v{i}".encode())
    producer.flush(10)
    wait_until(lambda: producer.poll(0.1) is not None and sum(
        e["count"] for e in seen if e["name"] == MetricName.SEND_MSGS and e["topic"] == topic) >= 20, timeout=15)
    sent = [e for e in seen if e["name"] == MetricName.SEND_MSGS and e["topic"] == topic]
    assert sum(e["count"] for e in sent) == 20  # deltas of librdkafka's cumulative counters
    latency = [e for e in seen if e["name"] == MetricName.SEND_LATENCY and e["count"]]
    assert latency and all(e["p99"] >= e["p50"] >= 0 and e["broker"] for e in latency)
    metrics.close(final_state=None)


def test_consumer_lag_from_statistics_and_prometheus_endpoint(obs_broker) -> None:
    topic = unique("lag")
    producer = Producer({"bootstrap.servers": obs_broker.bootstrap, "linger.ms": 0})
    for i in range(10):  # on Kafka (this module's broker) the high watermark is exact for any batching
        producer.produce(topic, f"v{i}".encode(), partition=0)
    producer.flush(10)
    metrics = Metrics(None, "c-lag", "consumer", cluster="dc-a", group="g-lag", interval_s=0.2, prometheus_port=0)
    c = consumer(obs_broker.bootstrap, "g-lag", **metrics.rdkafka_settings())
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    wait_until(lambda: got.extend(m for m in c.consume(10, 0.2) if m.error() is None) or len(got) >= 4, timeout=20)
    c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    wait_until(lambda: c.poll(0.1) is None and metrics.last_lag.get((topic, 0), (0, -1, 0))[1] == 4, timeout=15)
    lag, committed, end = metrics.last_lag[(topic, 0)]
    assert (lag, committed, end) == (6, 4, 10)
    assert metrics.prometheus is not None
    body = requests.get(f"http://127.0.0.1:{metrics.prometheus.port}/metrics", timeout=5).text
    line = next(x for x in body.splitlines() if x.startswith("ykafka_consumer_lag{") and f'topic="{topic}"' in x)
    assert 'group="g-lag"' in line and line.endswith(" 6.0")
    c.close()
    metrics.close(final_state=None)


def _scrape(port: int, topic: str) -> dict[str, float]:
    """The series of ``topic`` (and the producer's, which carry no topic) as Prometheus scrapes them: counters
    summed per metric name, latency series under ``latency:<name>`` (their p50)."""
    body = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out: dict[str, float] = {}
    for line in body.splitlines():
        counter = line.startswith("ykafka_events_total{") and f'topic="{topic}"' in line
        latency = line.startswith("ykafka_latency_ms{") and 'quantile="p50"' in line and (
            f'topic="{topic}"' in line or 'topic=""' in line)
        if not (counter or latency):
            continue
        labels, value = line.rsplit(" ", 1)
        found = re.search(r'name="([^"]+)"', labels)
        assert found is not None, line
        name = found.group(1) if counter else f"latency:{found.group(1)}"
        out[name] = out.get(name, 0.0) + float(value)
    return out


def _answer(out: Any, word: str) -> str:
    """The child's next ``word ...`` line (its log lines on the same stdout are skipped)."""
    for line in out:
        if line.startswith(word):
            return str(line.strip())
    raise AssertionError(f"the child exited before saying {word}")


def test_prometheus_port_of_a_running_producer_and_consumer_is_scraped_and_moves(tmp_path: Path) -> None:
    """The operator's path: a process runs a ykafka Producer and Consumer with ``ykafka.prometheus.port``; scraping
    that port shows the consumer's count of the topic exactly, moving with the traffic, its latency series, and
    the producer's send latency series."""
    with brokers(["prom"], tmp_path / "brokers") as started:  # private: its metric events count nowhere else
        bootstrap = started["prom"].bootstrap
        topic = unique("prom")
        create_topic(bootstrap, topic, 2)
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "tests.prometheus_child", bootstrap, topic, str(port),
                                 str(tmp_path / "cache")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                cwd=ROOT)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            _answer(proc.stdout, "READY")
            for total in (20, 50):
                proc.stdin.write(f"{total - (20 if total == 50 else 0)}\n")
                proc.stdin.flush()
                assert _answer(proc.stdout, "PRODUCED") == f"PRODUCED {total}"
                seen = wait_until(lambda t=total: (lambda m: m if m.get("consume.msgs", 0) >= t else None)(
                    _scrape(port, topic)), timeout=20, message=f"{total} consumed in the scrape")
                assert seen["consume.msgs"] == total, seen
            assert {"latency:process.latency_ms", "latency:consume.latency_ms", "latency:send.latency_ms",
                    "latency:send.rtt_ms"} <= set(seen), seen
            proc.stdin.write("HANDLED\n")
            proc.stdin.flush()
            assert _answer(proc.stdout, "HANDLED") == "HANDLED 50"
        finally:
            proc.stdin.close()
            code = proc.wait(30)
        assert code == 0


def test_client_events_reach_the_clients_topic_with_versions(obs_broker) -> None:
    sink = EventSink({"bootstrap.servers": obs_broker.bootstrap})
    metrics = Metrics(sink, "c-inv", "consumer", interval_s=3600)
    client_id = unique("client")
    report = {"client_id": client_id, "app_id": "billing", "ip": "10.0.0.7", "hostname": "h1", "pid": 4242,
              "versions": local_versions(), "role": "consumer", "topics": ["a", "b"], "group": "g-inv",
              "cluster": "dc-a", "state": "running", "extra": {"ephemeral": True}}
    metrics.watch_client(lambda: report, interval_s=3600)
    wait_until(lambda: sink.stats()["client"]["enqueued"] >= 1, timeout=10)
    metrics.close()  # a last event with state=closed
    found = read_events(obs_broker.bootstrap, events.CLIENTS_TOPIC, 2, lambda e: e["client_id"] == client_id)
    assert [e["state"] for e in found] == ["running", "closed"]
    event = found[0]
    assert (event["app"], event["topics"], event["group"], event["ephemeral"], event["pid"]) == (
        "billing", "a,b", "g-inv", True, 4242)
    assert event["librdkafka_version"] == confluent_kafka.libversion()[0]
    assert client_event_from_report(report)["ykafka_version"] == event["ykafka_version"]
