"""The pipeline on a real Spark cluster: a standalone master and two workers started from PySpark's own
``bin/spark-class`` (tests/pipeline_fixtures.py ``spark_cluster``), the jobs run with ``--master spark://...`` by
``ykafka pipeline run --once`` in its own driver process, and the store holds the results local mode gives for the
same events (trace lookup, aggregates, inventory: what tests/test_pipeline.py checks in local mode)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner

from tests.pipeline_fixtures import unique
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
    clients = [json.loads(line) for line in inv.output.splitlines()]
    mine = next(c for c in clients if c["client_id"] == client)
    rows = [json.loads(line) for line in agg.output.splitlines()]
    return {"trace": [json.loads(line)["msg_id"] for line in traced.output.splitlines()],
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
                           "--conf", "spark.cores.max=2", "--conf", "spark.sql.shuffle.partitions=2"],
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
    info = json.loads(shown.output)
    assert info["master"] == spark_cluster.master and info["alive_workers"] == 2
    assert sorted(d["name"] for d in info["daemons"] if d["running"]) == ["master", "worker-0", "worker-1"]
    again = runner.invoke(pipeline_cli, ["cluster", "up", "--home", spark_cluster.home])
    assert again.exit_code == 1 and "is still running" in again.output
    missing = runner.invoke(pipeline_cli, ["cluster", "status", "--home", spark_cluster.home + "-none"])
    assert missing.exit_code == 1 and "ykafka pipeline cluster up" in missing.output
