"""The SparkSession of the pipeline: local mode by default, any cluster through ``master``.

Defaults are sized for a small machine (no UI; in local mode as many shuffle partitions and read tasks as
the master has cores: a micro-batch here is small, and a task more than the cores only adds its start-up);
a cluster run passes its own ``--master`` and ``--conf`` values. The Python executable of the driver is used
for the workers, so the venv that has confluent-kafka and pyarrow is the one Spark runs our data source in.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from .source import KafkaDataSource

DEFAULT_MASTER = "local[*]"

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.memory": "1g",
    "spark.python.worker.reuse": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.stopTimeout": "10s",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -Xss4m",
}


#: the driver JVM of a one-shot run (``ykafka pipeline run --once``): C1 only. Such a JVM lives one batch, so C2's
#: compilations never pay back: on Kafka, 220,000 events after a 17,600-event warm-up took 0.048-0.059 CPU-s a
#: 1,000 events with C1 against 0.069-0.084 with C2 (its JIT threads 5-7.5 CPU-s of it), the warm-up batch 14-18 s
#: against 30-81 s (docs/benchmarks.md, issue 39). A continuous pipeline keeps the JVM's default (C2 still
#: compiled 2.8 CPU-s a batch in its third batch; what it gains over hours was not measured).
ONE_SHOT_JVM = "-XX:+UseSerialGC -Xss4m -XX:TieredStopAtLevel=1"


def one_shot(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` for a one-shot run: the C1-only driver JVM (:data:`ONE_SHOT_JVM`) unless ``conf`` sets its own."""
    return {"spark.driver.extraJavaOptions": ONE_SHOT_JVM, **conf}


def local_cores(master: str) -> int | None:
    """Cores of a ``local[N]`` / ``local[*]`` / ``local`` master (None for a cluster master)."""
    found = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if found is None:
        return None
    if found.group(1) is None:
        return 1
    return (os.cpu_count() or 1) if found.group(1) == "*" else max(1, int(found.group(1)))


def spark_session(master: str | None = None, conf: Mapping[str, str] | None = None,
                  app_name: str = "ykafka-pipeline") -> Any:
    """Get (or create) the SparkSession and register the ``ykafka-kafka`` streaming source."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(master or DEFAULT_MASTER)
    merged = dict(DEFAULT_CONF)
    cores = local_cores(master or DEFAULT_MASTER)
    if cores is not None:
        merged["spark.sql.shuffle.partitions"] = merged["spark.default.parallelism"] = str(cores)
    merged.update(conf or {})
    for key, value in merged.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaDataSource)
    return spark
