"""The pipeline on a real Spark cluster: a standalone master and two workers started from PySpark's own
``bin/spark-class`` (tests/pipeline_fixtures.py ``spark_cluster``), the jobs run with ``--master spark://...`` by
``ykafka pipeline run --once`` in its own driver process, and the store holds the results local mode gives for the
same events (trace lookup, aggregates, inventory: what tests/test_pipeline.py checks in local mode)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, NewTopic

from tests.pipeline_chaos import Driver, Traffic, caught_up, checkpoint, verify_exact
from tests.pipeline_fixtures import SPARK_TEST_JVM, unique, wait_until
from tests.support import ROOT
from ykafka.metrics import Metrics, local_versions
from ykafka.sink import EventSink
from ykafka.tracing import Tracer

pytest.importorskip("pyspark")


def _write_events(bootstrap: str, topic: str, client: str) -> None:
    sink = EventSink({"bootstrap.servers": bootstrap})
    tracer = Tracer(sink, client, "cluster-app", "10.1.1.2")
    for i in range(5):
        tracer.emit("acked", topic=topic, key=f"k{i}", msg_id=f"{topic}-{i}", partition=0, offset=i)
    metrics = Metrics(sink, client, "consumer", app="cluster-app", group="g-cluster", interval_s=3600,
                      own_sink=False)
    for ms in (5.0, 15.0, 25.0):
        metrics.observe("consume.latency_ms", ms, topic=topic, group="g-cluster")
    metrics.flush_timers()
    metrics.client_event({"client_id": client, "app_id": "cluster-app", "ip": "10.1.1.2", "hostname": "h", "pid": 7,
                          "versions": local_versions(), "role": "consumer", "topics": [topic], "group": "g-cluster",
                          "cluster": "dc-obs", "state": "running", "extra": {}})
    metrics.close(final_state=None)
    assert sink.flush(10) == 0
    sink.close()


def _results(store: str, topic: str, client: str) -> dict[str, Any]:
    from pipeline.cli import pipeline as pipeline_cli
    from pipeline.cli import trace as trace_cli

    runner = CliRunner()
    traced = runner.invoke(trace_cli, ["k3", "--topic", topic, "--store", store, "--json"])
    agg = runner.invoke(pipeline_cli, ["aggregates", "--store", store, "--topic", topic, "--json"])
    inv = runner.invoke(pipeline_cli, ["inventory", "--store", store, "--cached", "--json"])
    clients = [json.loads(line) for line in inv.stdout.splitlines()]
    mine = next(c for c in clients if c["client_id"] == client)
    rows = [json.loads(line) for line in agg.stdout.splitlines()]
    return {"trace": [json.loads(line)["msg_id"] for line in traced.stdout.splitlines()],
            "aggregates": [(r["name"], r["group"], r["count"], r["max"]) for r in rows],
            "client": mine}


@pytest.mark.slow
def test_pipeline_on_a_spark_cluster_gives_the_local_mode_results(obs_broker: Any, spark_cluster: Any,
                                                                  tmp_path: Path) -> None:
    master_url, master_ui = spark_cluster.master, spark_cluster.ui
    topic, client = unique("cluster"), unique("cl")
    _write_events(obs_broker.bootstrap, topic, client)
    cluster_store = str(tmp_path / "cluster")
    proc = subprocess.run([str(Path(sys.executable).parent / "ykafka"), "pipeline", "run", "--once", "--no-sampler",
                           "--master", master_url, "--bootstrap", obs_broker.bootstrap, "--store", cluster_store,
                           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=512m",
                           "--conf", "spark.cores.max=2", "--conf", "spark.sql.shuffle.partitions=2",
                           "--conf", f"spark.executor.extraJavaOptions={SPARK_TEST_JVM}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "done in" in proc.stdout
    # the cluster ran it: the master lists the finished application, with executors on its workers
    master = requests.get(f"{master_ui}/json/", timeout=5).json()
    assert any(app["name"] == "ykafka-pipeline" for app in master["completedapps"]), master
    found = _results(cluster_store, topic, client)
    assert found["trace"] == [f"{topic}-3"]  # the trace job: the key's message, by its id
    assert found["aggregates"] == [("consume.latency_ms", "g-cluster", 3, 25.0)]  # the aggregate job: 3 samples
    assert (found["client"]["app"], found["client"]["group"]) == ("cluster-app", "g-cluster")  # the inventory



def test_cluster_commands_show_and_guard_the_running_cluster(spark_cluster: Any) -> None:
    """``ykafka pipeline cluster status`` lists what ``up`` recorded (the fixture started it with the same code);
    a second ``up`` on the same home is refused while it runs."""
    from pipeline.cli import pipeline as pipeline_cli

    runner = CliRunner()
    shown = runner.invoke(pipeline_cli, ["cluster", "status", "--home", spark_cluster.home, "--json"])
    assert shown.exit_code == 0, shown.output
    info = json.loads(shown.stdout)
    assert info["master"] == spark_cluster.master and info["alive_workers"] == 2
    assert sorted(d["name"] for d in info["daemons"] if d["running"]) == ["master", "worker-0", "worker-1"]
    again = runner.invoke(pipeline_cli, ["cluster", "up", "--home", spark_cluster.home])
    assert again.exit_code == 1 and "is still running" in again.output
    missing = runner.invoke(pipeline_cli, ["cluster", "status", "--home", spark_cluster.home + "-none"])
    assert missing.exit_code == 1 and "ykafka pipeline cluster up" in missing.output


CLUSTER_CONF = ("spark.driver.host=127.0.0.1", "spark.executor.memory=512m", "spark.cores.max=2",
                f"spark.executor.extraJavaOptions={SPARK_TEST_JVM}")


def _pending(store: Path, query: str) -> set[int]:
    state = checkpoint(store, query)
    return state["logged"] - state["committed"] if state["committed"] else set()


@pytest.mark.slow
@pytest.mark.timeout(900)  # two drivers and their executors start on the cluster: minutes on a loaded machine
def test_cluster_survives_a_worker_then_the_driver_killed_mid_batch(obs_broker: Any, spark_cluster: Any,
                                                                    tmp_path: Path) -> None:
    from pipeline import cluster as spark

    bs = obs_broker.bootstrap
    topic, client = unique("clchaos"), unique("clchaos-prod")
    admin = AdminClient({"bootstrap.servers": bs})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(10)
    store, log = tmp_path / "store", tmp_path / "driver.log"
    traffic = Traffic(bs, topic, client).start()
    first = Driver(bs, store, log, master=spark_cluster.master, conf=CLUSTER_CONF).start()
    second: Driver | None = None
    victim = spark_cluster.workers()[0]

    def diagnose() -> str:
        try:
            info = requests.get(spark_cluster.ui + "/json/", timeout=5).json()
            apps = [(a["id"], a["state"], a["cores"]) for a in info.get("activeapps", [])]
            workers = [(w["id"][-12:], w["state"], w["coresused"]) for w in info.get("workers", [])]
        except (requests.RequestException, ValueError) as exc:
            apps, workers = [str(exc)], []
        return (f"\ncheckpoint {checkpoint(store, 'metrics')}\nmaster: active apps {apps}, workers {workers}\n"
                f"driver log:\n{log.read_text(errors='replace')[-4000:]}")

    try:
        # 1. a worker dies (its JVM, executor and Python workers: the whole session) while a batch is in flight
        killed_worker_in: int | None = None
        deadline = time.monotonic() + 240
        while killed_worker_in is None and time.monotonic() < deadline:
            assert first.alive(), log.read_text()[-3000:]
            pending = _pending(store, "metrics")
            if pending:
                spark.kill(victim)
                killed_worker_in = max(pending)
            time.sleep(0.01)
        assert killed_worker_in is not None, "no metrics micro-batch was in flight on the cluster"
        wait_until(lambda: not spark.runs(victim), 15, message="the worker's JVM is gone")
        # the remaining worker's executor finishes the interrupted batch and the next ones
        wait_until(lambda: max(checkpoint(store, "metrics")["committed"], default=-1) > killed_worker_in + 1, 180,
                   message="batches committed past the one the worker died in")
        assert first.alive(), log.read_text()[-3000:]
        spark_cluster.daemons.remove(victim)  # the operator replaces the lost worker
        spark.add_worker(spark_cluster)

        # 2. the driver dies mid-batch; a new one on the same checkpoint carries on
        killed_driver_in: int | None = None
        deadline = time.monotonic() + 120
        while killed_driver_in is None and time.monotonic() < deadline:
            pending = _pending(store, "metrics")
            if pending:
                first.kill()
                killed_driver_in = max(pending)
            time.sleep(0.005)
        assert killed_driver_in is not None, "no metrics micro-batch was caught in flight for the driver kill"
        time.sleep(2)  # events keep coming while no driver runs
        second = Driver(bs, store, log, master=spark_cluster.master, conf=CLUSTER_CONF).start()
        wait_until(lambda: second.alive() and max(checkpoint(store, "metrics")["committed"], default=-1)
                   > killed_driver_in, 180, message="the restarted driver committed batches past the interrupted one")
        traffic.stop()
        assert traffic.failed == []
        assert len(traffic.acked) == traffic.sent == len(set(traffic.acked))
        wait_until(lambda: second.alive() and caught_up(bs, store), 120,
                   message="the restarted driver caught up with the topics")
    except AssertionError as exc:
        raise AssertionError(f"{exc}{diagnose()}") from None
    finally:
        traffic.close()
        first.kill()
        if second is not None:
            second.kill()
        if victim in spark_cluster.daemons:  # later tests get two workers again
            spark_cluster.daemons.remove(victim)
            spark.add_worker(spark_cluster)
    counted = verify_exact(bs, store, topic, traffic)
    assert counted["acked_in_store"] == counted["send_msgs"] == traffic.sent
    result = {**counted, "worker_killed_in_batch": killed_worker_in, "driver_killed_in_batch": killed_driver_in}
    print(f"RESULT {json.dumps(result)}")
