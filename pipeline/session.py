"""The SparkSession of the pipeline: local mode by default, any cluster through ``master``.

Defaults are sized for a small machine (no UI; in local mode as many shuffle partitions and read tasks as
the master has cores: a micro-batch here is small, and a task more than the cores only adds its start-up);
a cluster run passes its own ``--master`` and ``--conf`` values. The Python executable of the driver is used
for the workers, so the venv that has confluent-kafka and pyarrow is the one Spark runs our data source in.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

import structlog

from .source import KafkaDataSource

log = structlog.get_logger(__name__)

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
    # C1 only (issue 39, docs/benchmarks.md): the driver JVM now plans, schedules and copies packed Arrow, and its
    # hot code is Spark's planner, run a few times a batch; C2 kept compiling it (2 CPU-s a 220,000-event batch,
    # 0.09 CPU-s a second of a running pipeline) and its code did not run faster: on Kafka, C1 / C2 measured
    # 53,656 / 41,415 events/s one-shot and 0.49 / 0.60 CPU-s a second running
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -Xss4m -XX:TieredStopAtLevel=1",
}


def local_cores(master: str) -> int | None:
    """Cores of a ``local[N]`` / ``local[*]`` / ``local`` master (None for a cluster master)."""
    found = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if found is None:
        return None
    if found.group(1) is None:
        return 1
    return (os.cpu_count() or 1) if found.group(1) == "*" else max(1, int(found.group(1)))


#: the Python a local Spark starts its workers with: the driver's, without Spark's own copy of pyspark on the path
#: (see :func:`worker_python`)
WORKER_PYTHON = """#!/bin/sh
# ykafka pipeline: the Python of Spark's local workers ({python}). Spark puts its pyspark.zip (and
# spark-core's jar) first on every worker's PYTHONPATH; Python compiles a module imported from a zip
# every time (no bytecode cache there), ~1.6 CPU-s a worker process. The same pyspark is installed,
# compiled, beside this Python: drop those entries and run it.
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
  case $entry in
    {zip}|{jars}/*.jar) ;;
    *) kept=${{kept:+$kept:}}$entry ;;
  esac
done
unset IFS
if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi
exec {python} "$@"
"""


#: the worker Pythons :func:`spark_session` set (a later session on a cluster master puts back this Python)
_CHOSEN: set[str] = set()


def worker_python() -> str:
    """The executable a local Spark's Python workers run: a wrapper of this Python (:data:`WORKER_PYTHON`) when
    Spark is the installed pyspark, else this Python.

    Spark starts a Python process for each streaming source's planner and for every worker it forks, and puts
    ``$SPARK_HOME/python/lib/pyspark.zip`` first on its path. Python caches no bytecode for a module imported
    from a zip, so each such process compiled pyspark again: 2.2 CPU-s to import what a query's source runner
    imports, against 0.56 from the installed, compiled package. A one-shot run starts three runners, so that
    was ~5 of its 12-20 CPU-s (issue 39, docs/benchmarks.md). Only for the pip-installed pyspark (the zip is
    built from the same files) and a local master (a cluster's executors may not have this path)."""
    import shlex

    import pyspark

    home = os.path.dirname(os.path.abspath(pyspark.__file__))
    if os.path.realpath(os.environ.get("SPARK_HOME") or home) != os.path.realpath(home):
        return sys.executable  # a Spark distribution of its own: its zip is its pyspark
    text = WORKER_PYTHON.format(python=shlex.quote(sys.executable),
                                zip=_glob_quote(os.path.join(home, "python", "lib", "pyspark.zip")),
                                jars=_glob_quote(os.path.join(home, "jars")))
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ykafka")
    path = os.path.join(cache, f"spark-python-{hashlib.sha256(text.encode()).hexdigest()[:16]}")
    try:
        if _read(path) != text:  # absent, or not what this Python would write (never run blind what is there)
            os.makedirs(cache, mode=0o700, exist_ok=True)
            staged = f"{path}.{os.getpid()}"
            with open(staged, "w", encoding="utf-8") as out:
                out.write(text)
            os.chmod(staged, 0o700)
            os.replace(staged, path)
    except OSError as exc:  # no writable cache (a read-only home): slower workers, the same results
        log.warning("ykafka.pipeline.worker_python_unavailable", cache=cache, error=str(exc))
        return sys.executable
    return path


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as found:
            return found.read()
    except (OSError, UnicodeDecodeError):
        return None


def _glob_quote(path: str) -> str:
    """``path`` as a literal sh ``case`` pattern."""
    return "".join(f"[{c}]" if c in "*?[]" else "\\" + c if not (c.isalnum() or c in "/._-") else c
                   for c in path)


def session_conf(master: str | None = None, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings of a session: :data:`DEFAULT_CONF`, sized to a local master's cores, under ``conf``."""
    merged = dict(DEFAULT_CONF)
    cores = local_cores(master or DEFAULT_MASTER)
    if cores is not None:
        merged["spark.sql.shuffle.partitions"] = merged["spark.default.parallelism"] = str(cores)
    merged.update(conf or {})
    return merged


def spark_session(master: str | None = None, conf: Mapping[str, str] | None = None,
                  app_name: str = "ykafka-pipeline") -> Any:
    """Get (or create) the SparkSession and register the ``ykafka-kafka`` streaming source."""
    from pyspark.sql import SparkSession

    cores = local_cores(master or DEFAULT_MASTER)
    if os.environ.get("PYSPARK_PYTHON") in (None, *_CHOSEN):  # the user's own choice stands
        _CHOSEN.add(chosen := sys.executable if cores is None else worker_python())
        os.environ["PYSPARK_PYTHON"] = chosen
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(master or DEFAULT_MASTER)
    for key, value in session_conf(master, conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaDataSource)
    return spark
