"""End to end on a real Tansu broker and Spark local[2]: known messages -> pipeline -> trace, alerts, inventory,
group lifecycle.

One scenario, one SparkSession: producing and consuming with tracing (one message retried then processed,
one dead-lettered), a consumer made to stall while its topic grows, an idle group, an ephemeral group whose
last client closes, acknowledged-but-never-consumed messages in an old bucket, and slow handlers. The
pipeline runs once; then the ``ykafka trace`` command must show each chosen key's exact lifecycle, and the
alerts, inventory and group cleanup must say what happened, with evidence.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pipeline.cli import groups as groups_cli
from pipeline.cli import trace as trace_cli
from pipeline.runner import Pipeline, PipelineConfig
from pipeline.store import Store
from tests.pipeline_fixtures import consumer, unique, wait_until
from ykafka import Producer as YProducer
from ykafka import __version__, events
from ykafka.consumer import Consumer as YConsumer
from ykafka.consumer import dlq_topic, retry_topic
from ykafka.metrics import Metrics, local_versions
from ykafka.sink import EventSink
from ykafka.tracing import Tracer

ALL = {"trace.enabled": True, "trace.sample.rate": 1.0}


def create_topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(10)


def consume(c: Consumer, n: int, timeout: float = 30.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg)
    assert len(got) == n, f"consumed {len(got)} of {n}"
    return got


def report(client_id: str, role: str, topics: list[str], group: str | None = None, state: str = "running",
           ephemeral: bool = False) -> dict[str, Any]:
    return {"client_id": client_id, "app_id": "shop", "ip": "10.9.8.7", "hostname": "test-host", "pid": 123,
            "versions": local_versions(), "role": role, "topics": topics, "group": group, "cluster": "dc-obs",
            "state": state, "extra": {"ephemeral": ephemeral}}


@pytest.mark.slow
def test_pipeline_end_to_end(obs_broker, spark, tmp_path: Path) -> None:
    bs = obs_broker.bootstrap
    orders, stalled, audited = unique("orders"), unique("stalled"), unique("audited")
    g_main, g_stall, g_idle, g_eph = unique("g-main"), unique("g-stall"), unique("g-idle"), unique("g-eph")
    retry, dlq = retry_topic(g_main, orders, 1), dlq_topic(g_main, orders)
    create_topics(bs, orders, stalled, retry, dlq)
    sink = EventSink({"bootstrap.servers": bs, "linger.ms": 20})
    tr_prod = Tracer.for_client("prod-1", "10.0.0.1", None, app="shop", cluster="dc-obs", sink=sink)
    tr_cons = Tracer.for_client("cons-1", "10.0.0.2", None, app="shop", cluster="dc-obs", sink=sink)
    m_cons = Metrics(sink, "cons-1", "consumer", app="shop", cluster="dc-obs", group=g_main, interval_s=3600,
                     own_sink=False)

    # --- produce 6 messages through the ykafka Producer of a P0 topic: every message traced -------------
    yk = YProducer({"bootstrap.servers": bs, "topic.grade": "P0", "ykafka.client.id": "prod-1",
                    "ykafka.trace.linger.ms": 20, "linger.ms": 0})
    ids: dict[str, str] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None
        ids[msg.key().decode()] = f"{msg.topic()}/{msg.partition()}/{msg.offset()}"  # rate 1.0: coordinates

    for i in range(6):
        yk.produce(orders, f"v-k{i}".encode(), f"k{i}".encode(), partition=0, on_delivery=delivered)
    assert yk.flush(10) == 0 and len(ids) == 6
    assert yk.in_force(orders)["topic.grade"] == "P0"
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 0})

    # --- the ykafka Consumer runs a handler: k3 fails once (retried), k4 always fails (dead-lettered) -------
    # It traces every step itself (trace rate 1.0); its own metrics are off so that the slow-handler alert
    # below judges exactly the known 2500 ms samples of cons-1.
    c_main = YConsumer({"bootstrap.servers": bs, "group.id": g_main, "auto.offset.reset": "earliest",
                        "session.timeout.ms": 6000, "ykafka.client.id": "cons-run", "ykafka.metrics.enabled": False,
                        "ykafka.cache.dir": str(tmp_path / "cache"), "ykafka.trace.linger.ms": 20, **ALL,
                        "consumer.retry.max.attempts": 1, "consumer.retry.backoff.ms": "100"})

    def handle(msg: Any) -> None:
        m_cons.observe("process.latency_ms", 2500.0, topic=orders, group=g_main)  # slow handler
        key = msg.key().decode()
        attempt = int(dict(msg.headers() or []).get("ykafka-attempt", b"0"))
        if key == "k4" or (key == "k3" and attempt == 0):
            raise ValueError("bad")

    runner_thread = threading.Thread(target=c_main.run, args=(handle, [orders]), daemon=True)
    runner_thread.start()
    wait_until(lambda: c_main.engine.processed >= 8 and c_main.engine.router is not None
             and c_main.engine.router.sent_dlq == 1, timeout=60)  # 6 originals + 2 retry copies
    c_main.stop()
    runner_thread.join(30)
    assert not runner_thread.is_alive()
    c_main.close()

    # --- acknowledged long ago but one never reached its group: a loss in an old bucket ------------------
    old_ms = events.now_ms() - 30 * 60_000
    for i in range(3):
        tr_prod.emit("acked", topic=audited, key=f"a{i}", msg_id=f"audit-{orders}-{i}", partition=0, offset=i,
                     msg_ts=old_ms)
        if i != 1:
            tr_cons.emit("consumed", topic=audited, key=f"a{i}", msg_id=f"audit-{orders}-{i}", group="g-audit",
                         msg_ts=old_ms)

    # --- clients report themselves (the ykafka Producer does on its own, at start and at close) ---------
    m_cons.client_event(report("cons-1", "consumer", [orders], g_main))
    yk.close()

    # --- an idle group and an ephemeral group whose only client closes ----------------------------------
    for group in (g_idle, g_eph):
        c = consumer(bs, group)
        c.subscribe([orders])
        consume(c, 1)
        c.commit(asynchronous=False)
        c.close()
    m_cons.client_event(report("eph-1", "consumer", [orders], g_eph, state="closed", ephemeral=True))
    assert sink.flush(10) == 0

    # --- a consumer that stalls: alive in its group, committed offset frozen, topic growing ---------------
    for i in range(3):
        producer.produce(stalled, f"s{i}".encode(), partition=0)
        producer.flush(10)  # one record per batch: Tansu's watermark is exact then
    c_stall = consumer(bs, g_stall)
    c_stall.subscribe([stalled])
    consume(c_stall, 2)
    c_stall.commit(offsets=[TopicPartition(stalled, 0, 2)], asynchronous=False)

    store = Store(str(tmp_path / "store"))
    pipeline = Pipeline(PipelineConfig(
        bootstrap=bs, store=store.root, cluster="dc-obs", alert_overrides={
            "window_s": 600,
            "latency": [{"name": "process-latency-p95", "metric": "process.latency_ms", "stat": "p95",
                         "threshold_ms": 1000, "level": "WARN"}],
            "lag": {"name": "consumer-lag", "window": 5, "min_samples": 3, "lookback_s": 900,
                    "groups": [g_stall]},
            "audit": {"name": "completeness", "bucket_s": 600, "grace_s": 60, "lookback_s": 7200},
            "sinks": {"kafka": True}}), spark=spark)
    for i in range(3):  # the sampler sees the lag grow while the commit stays at 2
        producer.produce(stalled, f"more{i}".encode(), partition=0)
        producer.flush(10)
        assert any(s["group"] == g_stall for s in pipeline.sample_lag())
        time.sleep(0.5)
    m_cons.flush_timers()
    assert sink.flush(10) == 0

    result = pipeline.run_once()

    # --- the trace command shows each key's exact lifecycle -------------------------------------------
    runner = CliRunner()

    def timeline(key: str) -> list[tuple[Any, ...]]:
        out = runner.invoke(trace_cli, [key, "--topic", orders, "--store", store.root, "--json"])
        assert out.exit_code == 0, out.output
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        assert {r["msg_id"] for r in rows} == {ids[key]}
        return [(r["kind"], r["group"], r["detail"], r["attempt"]) for r in rows]

    assert timeline("k0") == [("produced", None, None, None), ("acked", None, None, None),
                              ("consumed", g_main, None, None), ("processed", g_main, None, None)]
    assert timeline("k3") == [("produced", None, None, None), ("acked", None, None, None),
                              ("consumed", g_main, None, None), ("retried", g_main, retry, None),
                              ("consumed", g_main, retry, 1), ("processed", g_main, retry, 1)]
    assert timeline("k4") == [("produced", None, None, None), ("acked", None, None, None),
                              ("consumed", g_main, None, None), ("retried", g_main, retry, None),
                              ("consumed", g_main, retry, 1), ("dead-lettered", g_main, dlq, 1)]
    shown = runner.invoke(trace_cli, ["k4", "--store", store.root], terminal_width=200)
    assert shown.exit_code == 0 and "dead-lettered" in shown.output and ids["k4"] in shown.output
    assert runner.invoke(trace_cli, ["nope", "--store", store.root]).exit_code == 1

    # --- alerts, with reasons and evidence --------------------------------------------------------------
    by_rule = {(a["rule"], a["topic"]): a for a in result["alerts"]}
    lag = by_rule[("consumer-lag", stalled)]
    assert (lag["level"], lag["group"], lag["partition"], lag["status"]) == ("ERR", g_stall, 0, "firing")
    window = json.loads(lag["evidence"])["window"]
    assert [w[1] for w in window] == [2] * len(window) and len(window) >= 3  # committed offset frozen at 2
    assert [w[3] for w in window] == sorted(w[3] for w in window) and window[-1][3] > window[0][3]
    assert "while the committed offset stayed at 2" in lag["reason"]
    slow = by_rule[("process-latency-p95", orders)]
    assert slow["group"] == g_main and json.loads(slow["evidence"])["value"] == 2500.0
    loss = by_rule[("completeness", audited)]
    evidence = json.loads(loss["evidence"])
    assert (loss["level"], loss["group"], evidence["acked"], evidence["received"]) == ("LOSS", "g-audit", 3, 2)
    assert evidence["missing_examples"] == [{"msg_id": f"audit-{orders}-1", "key": "a1"}]
    assert "bucket" in loss["reason"] and evidence["bucket_start"] == old_ms // 600_000 * 600_000
    assert not any(a["topic"] == orders and a["rule"] == "completeness" for a in result["alerts"])
    on_topic = [e for e in wait_until(lambda: _alerts(bs, stalled)) if e["rule"] == "consumer-lag"]
    assert on_topic[0]["id"] == lag["id"]

    # --- inventory lists the test clients with their versions -----------------------------------------
    inventory = {r["client_id"]: r for r in result["inventory"]}
    assert {"prod-1", "cons-1", "eph-1"} <= set(inventory)
    assert (inventory["prod-1"]["role"], inventory["prod-1"]["state"], inventory["prod-1"]["topics"]) == (
        "producer", "closed", orders)
    assert (inventory["cons-1"]["librdkafka_version"], inventory["cons-1"]["ykafka_version"],
            inventory["cons-1"]["group"], inventory["cons-1"]["cluster"]) == (
        confluent_kafka.libversion()[0], __version__, g_main, "dc-obs")

    # --- group lifecycle: ephemeral deleted in real time, idle found and removed on --apply ----------
    assert result["ephemeral"][g_eph] is None  # deleted (other tests' ephemeral clients may show up too)
    listed = runner.invoke(groups_cli, ["list", "--bootstrap", bs, "--store", store.root, "--idle", "1s", "--json"])
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert "page" in rows[-1]  # the paged list's last line: where the next page starts
    candidates = {row["candidate"] for row in rows[:-1]}
    assert {g_idle, g_main} <= candidates and g_stall not in candidates and g_eph not in candidates
    cleaned = runner.invoke(groups_cli, ["cleanup", "--bootstrap", bs, "--store", store.root, "--idle", "1s",
                                         "--apply", "--json"])
    assert cleaned.exit_code == 0, cleaned.output
    deleted = {json.loads(line)["deleted"] for line in cleaned.stdout.splitlines() if '"deleted"' in line}
    assert {g_idle, g_main} <= deleted
    assert pipeline.sampler is not None
    remaining = {g.group for g in pipeline.sampler.groups()}
    assert g_stall in remaining and not {g_idle, g_main, g_eph} & remaining
    c_stall.close()

    # --- exactly once across runs: a second run adds only what is new ---------------------------------
    before = store.read("trace").num_rows
    tr_prod.emit("produced", topic=orders, key="k-late", msg_id="late-1")
    assert sink.flush(10) == 0
    pipeline.run_once(evaluate=False, build_inventory=False)
    assert store.read("trace").num_rows == before + 1
    assert [r["kind"] for r in _lookup(store, "k-late", orders)] == ["produced"]
    pipeline.close()
    m_cons.close(final_state=None)
    sink.close()


def _alerts(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from tests.pipeline_fixtures import read_events

    return read_events(bootstrap, events.ALERTS_TOPIC, 1, lambda e: e["topic"] == topic, timeout=5)


def _lookup(store: Store, key: str, topic: str) -> list[dict[str, Any]]:
    from pipeline.trace_store import lookup

    return lookup(store, key, topic=topic, since=dt.timedelta(hours=2))


def test_pipeline_commands_run_once_and_read_the_store(obs_broker, spark, tmp_path: Path) -> None:
    """``ykafka pipeline run --once`` (reusing the session's Spark), then the store readers of the CLI."""
    from pipeline.cli import pipeline as pipeline_cli

    bs = obs_broker.bootstrap
    topic = unique("cli")
    sink = EventSink({"bootstrap.servers": bs})
    tracer = Tracer(sink, "cli-1", "cli-app", "10.1.1.1")
    for i in range(3):
        tracer.emit("acked", topic=topic, key=f"c{i}", msg_id=f"{topic}-{i}", partition=0, offset=i)
    metrics = Metrics(sink, "cli-1", "consumer", app="cli-app", group="g-cli", interval_s=3600, own_sink=False)
    for ms in (10.0, 20.0, 30.0, 40.0):
        metrics.observe("consume.latency_ms", ms, topic=topic, group="g-cli")
    metrics.flush_timers()
    metrics.client_event(report("cli-1", "consumer", [topic], "g-cli"))
    metrics.close(final_state=None)
    assert sink.flush(10) == 0
    sink.close()
    store = str(tmp_path / "store")
    runner = CliRunner()
    ran = runner.invoke(pipeline_cli, ["run", "--once", "--no-sampler", "--bootstrap", bs, "--store", store])
    assert ran.exit_code == 0, ran.output
    assert "done in" in ran.output and "trace" in ran.output
    out = runner.invoke(trace_cli, ["c1", "--topic", topic, "--store", store, "--json"])
    assert [json.loads(line)["msg_id"] for line in out.stdout.splitlines()] == [f"{topic}-1"]
    agg = runner.invoke(pipeline_cli, ["aggregates", "--store", store, "--topic", topic, "--json"])
    rows = [json.loads(line) for line in agg.stdout.splitlines()]
    assert [(r["name"], r["group"], r["count"], r["max"]) for r in rows] == [("consume.latency_ms", "g-cli", 4, 40.0)]
    inv = runner.invoke(pipeline_cli, ["inventory", "--store", store, "--cached", "--json"])
    clients = {json.loads(line)["client_id"]: json.loads(line) for line in inv.stdout.splitlines()}
    assert clients["cli-1"]["group"] == "g-cli" and clients["cli-1"]["librdkafka_version"]


def test_the_driver_jvm_is_c1_only_unless_the_conf_names_one() -> None:
    """Every run's driver JVM compiles with C1 only: with the events packed it plans and copies, and C2's compilations
    cost more than they gave (issue 39, docs/benchmarks.md); an application's own ``spark.driver.extraJavaOptions``
    is kept, and a local master sizes the shuffle to its cores."""
    from pipeline.session import session_conf

    conf = session_conf("local[2]", {"spark.sql.shuffle.partitions": "3"})
    assert "-XX:TieredStopAtLevel=1" in conf["spark.driver.extraJavaOptions"].split()
    assert conf["spark.sql.shuffle.partitions"] == "3" and conf["spark.default.parallelism"] == "2"
    assert session_conf("spark://h:7077", {"spark.driver.extraJavaOptions": "-Xss8m"})[
        "spark.driver.extraJavaOptions"] == "-Xss8m"


def test_a_read_limit_splits_the_backlog_into_micro_batches_in_a_spark_run(obs_broker, spark, tmp_path: Path) -> None:
    """``--max-offsets-per-trigger`` through Spark itself: Spark hands the source its options with lower-cased
    names, which a plain dict never found, so every run read its whole backlog in one micro-batch (issue 39). Now
    the backlog comes in batches of at most the cap, and every event is stored once."""
    sink = EventSink({"bootstrap.servers": obs_broker.bootstrap, "linger.ms": 0})
    tag = unique("cap")
    now = events.now_ms()
    for i in range(12):  # twelve Kafka messages of one event each
        sink.put("trace", events.row("trace", {"ts": now + i, "kind": "consumed", "msg_id": f"{tag}-{i}",
                                               "topic": tag, "partition": 0, "offset": i, "client_id": "cap-1"}))
        assert sink.flush(10) == 0
    sink.close()
    pipeline = Pipeline(PipelineConfig(bootstrap=obs_broker.bootstrap, store=str(tmp_path / "store"),
                                       sample_lag=False, max_offsets_per_trigger=4), spark=spark)
    try:
        pipeline.process_available(("trace",))
    finally:
        pipeline.close()
    stored = [i for i in pipeline.store.read("trace").column("msg_id").to_pylist() if i and i.startswith(tag)]
    assert sorted(stored) == sorted(f"{tag}-{i}" for i in range(12))
    assert pipeline.stats["trace"].batches >= 3  # 12 of ours alone need 3 batches of 4


def test_records_of_sparks_own_kafka_source_decode_in_spark_as_the_python_reader_does(spark) -> None:
    """``--source jvm``: Spark's own ``kafka`` source gives rows of ``topic`` and ``value``; ``decode.decode`` turns
    them into packed typed events in Spark's Python workers (``mapInArrow``). Fed such rows (the connector's jar is
    not needed to make them), the handler's ``unpack`` gets every event the default source's packs of the same
    records hold, a forged claim on an app's own topic flagged, a value that is not a batch left out."""
    import pyarrow as pa

    from pipeline.decode import FORGED, decode, drop_forged, packed, unpack

    now = 1_750_000_000_000
    own = events.app_topic("trace", "app-a")
    records = [(events.TRACE_TOPIC, events.encode_rows("trace", [(now + i, "consumed", f"m-{i}", "t", f"k{i}")
                                                                  for i in range(300)], {"client_id": "c-1"})),
               (own, events.encode_rows("trace", [(now, "consumed", "m-own", "t")], {"client_id": "c-2",
                                                                                     "app": "app-a"})),
               (own, events.encode_rows("trace", [(now, "consumed", "m-forged", "t")], {"client_id": "c-3",
                                                                                        "app": "app-b"})),
               (events.TRACE_TOPIC, b"not json"),
               (events.TRACE_TOPIC, events.encode_rows("metric", [[now, "send.latency_ms"]]))]
    frame = spark.createDataFrame([(t, bytearray(v)) for t, v in records], "topic string, value binary")
    got = unpack("trace", decode(frame.repartition(2), "trace").toArrow())
    raw = pa.RecordBatch.from_arrays([pa.array([t for t, _ in records]), pa.array([v for _, v in records],
                                                                                  pa.binary())], ["topic", "value"])
    expected = unpack("trace", pa.Table.from_batches(list(packed("trace", [raw]))))
    key = ["msg_id", "kind", "ts", "client_id", "app", FORGED]

    def rows(table: Any) -> list[tuple[Any, ...]]:
        return sorted(zip(*(table.column(n).to_pylist() for n in key), strict=True), key=repr)

    assert got.num_rows == 302 and rows(got) == rows(expected)
    kept, found = drop_forged(got)
    assert found == {("app-a", "app-b"): 1} and kept.num_rows == 301
    with pytest.raises(ValueError, match="no telemetry events of kind 'bogus'"):
        decode(frame, "bogus")
