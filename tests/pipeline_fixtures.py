"""Fixtures of the observability tests: a private broker (the module's kind, ``pytest.mark.broker``), one
SparkSession per test session, helpers.

The broker is private because the pipeline reads the shared ``__ykafka_*`` topics whole: other tests'
clients must not leak events into what these tests count. Spark starts once per session (it takes
10-20 s on a loaded 2-core machine) in ``local[2]``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError

from tests.helpers import unique as unique
from tests.helpers import wait_until as wait_until
from tests.support import Broker, broker_kind, tansu_group_quirk
from ykafka import events

#: the options of every JVM Spark starts for a test: the driver (``spark-submit``: SPARK_SUBMIT_OPTS, also the
#: drivers ``ykafka pipeline run`` starts as subprocesses, which inherit the environment), a standalone cluster's
#: master and workers (SPARK_DAEMON_JAVA_OPTS) and its executors (``spark.executor.extraJavaOptions``, in the
#: cluster tests' ``--conf``). A test's Spark JVM lives a minute or two on tiny batches: C2's compile threads and
#: the parallel GC's threads cost CPU that never pays back on 2 cores (test_pipeline_checkpoint: 94 CPU-s instead
#: of 115, the same outcome; a master and two workers up: 17-19 CPU-s instead of 33-40, 77-104 s instead of
#: 175-205 s at a load of 20). The product's defaults (pipeline/session.py) keep C2 for long-running drivers.
SPARK_TEST_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
os.environ.setdefault("SPARK_SUBMIT_OPTS", SPARK_TEST_JVM)
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", SPARK_TEST_JVM)


def _obs_broker(tmp_path_factory: pytest.TempPathFactory, kind: str) -> Iterator[Broker]:
    broker = Broker("obs", tmp_path_factory.mktemp(f"obs-broker-{kind}"), broker=kind).start()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="session")
def tansu_obs_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from _obs_broker(tmp_path_factory, "tansu")


@pytest.fixture(scope="session")
def kafka_obs_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    yield from _obs_broker(tmp_path_factory, "kafka")


@pytest.fixture(scope="module")
def obs_broker(request: pytest.FixtureRequest) -> Broker:
    """The observability tests' private cluster on the module's broker kind."""
    found: Broker = request.getfixturevalue(f"{broker_kind(request)}_obs_broker")
    return found


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark standalone master and two workers (one core, 512 MB each) on loopback, started from PySpark's own
    ``bin/spark-class`` by ``pipeline.cluster`` (what ``ykafka pipeline cluster up`` runs) and stopped by pid;
    yields the ``SparkCluster`` (``.master`` is ``spark://127.0.0.1:PORT``, ``.ui`` its web UI)."""
    from pipeline import cluster

    home = tmp_path_factory.mktemp("spark-cluster")
    try:
        yield cluster.up(home, workers=2, cores=1, memory="512m")
    finally:
        cluster.down(home)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pipeline.session import spark_session

    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"}, app_name="ykafka-tests")
    try:
        yield session
    finally:
        session.stop()


def consumer(bootstrap: str, group: str | None = None, **extra: Any) -> Consumer:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group or unique("g"),
                            "auto.offset.reset": "earliest", **tansu_group_quirk(bootstrap),
                            "enable.auto.commit": False, "log_level": 3}
    conf.update(extra)
    return Consumer(conf)


def read_events(bootstrap: str, topic: str, expected: int, match: Callable[[dict[str, Any]], bool] = lambda e: True,
                timeout: float = 20.0) -> list[dict[str, Any]]:
    """Decoded events of ``topic`` that ``match``, reading until ``expected`` of them arrived (or timeout)."""
    from confluent_kafka import TopicPartition

    c = consumer(bootstrap)
    found: list[dict[str, Any]] = []
    try:
        meta = wait_until(lambda: c.list_topics(topic, timeout=5).topics.get(topic), timeout)
        c.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
        deadline = time.monotonic() + timeout
        while len(found) < expected and time.monotonic() < deadline:
            for msg in c.consume(1000, 0.5):
                if msg.error() is None:
                    found.extend(e for _kind, e in events.iter_events(iter([msg.value()])) if match(e))
                elif msg.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(str(msg.error()))
    finally:
        c.close()
    return found


def store_dir(tmp_path: Path) -> str:
    return str(tmp_path / "store")
