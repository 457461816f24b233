"""pipeline/session.py: a local Spark's Python workers import the installed, compiled pyspark, not Spark's zip."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyspark

from pipeline.session import worker_python

HOME = os.path.dirname(os.path.abspath(pyspark.__file__))
ZIP = os.path.join(HOME, "python", "lib", "pyspark.zip")
JAR = glob.glob(os.path.join(HOME, "jars", "spark-core_*.jar"))[0]
PY4J = glob.glob(os.path.join(HOME, "python", "lib", "py4j-*-src.zip"))[0]


def test_the_worker_python_drops_sparks_own_pyspark_from_the_path_and_keeps_the_rest(tmp_path: Any) -> None:
    """What Spark sets (its zip, py4j's, spark-core's jar, the user's path) goes in; out comes the same path without
    the zip and the jar, so ``import pyspark`` finds the installed package and its bytecode cache."""
    wrapper = worker_python()
    assert os.access(wrapper, os.X_OK) and wrapper != sys.executable
    py4j = PY4J
    own = str(tmp_path / "with space*[x]")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ZIP, py4j, JAR, own])}
    out = subprocess.run([wrapper, "-c", "import sys, pyspark; print(repr((sys.path, pyspark.__file__)))"],
                         env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    path, found = eval(out)  # noqa: S307 - our own child's repr
    assert ZIP not in path and JAR not in path and py4j in path and own in path
    assert found == os.path.join(HOME, "__init__.py")
    assert worker_python() == wrapper  # written once, by its content


def test_spark_workers_run_the_compiled_pyspark(spark: Any) -> None:
    """Through a real local Spark: its Python workers (forked by the daemon Spark starts with this Python) load
    pyspark from the installed package, not from the zip Spark puts first on their path."""
    def where(_: Any) -> Any:
        import sys as worker_sys

        import pyspark as worker_pyspark

        yield (worker_pyspark.__file__, [p for p in worker_sys.path if p.endswith(".zip") or p.endswith(".jar")])

    (found, archives), = spark.sparkContext.parallelize([1], 1).mapPartitions(where).collect()
    assert found == os.path.join(HOME, "__init__.py")
    assert ZIP not in archives and JAR not in archives


def test_without_a_writable_cache_the_workers_run_this_python(tmp_path: Any, monkeypatch: Any) -> None:
    """A read-only home must not stop the pipeline: the workers then run this Python as they did before."""
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache directory would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert worker_python() == sys.executable


def test_a_wrapper_that_is_not_what_this_python_writes_is_written_again(tmp_path: Any, monkeypatch: Any) -> None:
    """The cached wrapper is run by Spark: one changed on disk (by another program, or a half-written copy) is not
    run as found, but replaced by this Python's own before it is handed to Spark."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    wrapper = worker_python()
    expected = Path(wrapper).read_text(encoding="utf-8")
    Path(wrapper).write_text("#!/bin/sh\necho tampered\n", encoding="utf-8")
    assert worker_python() == wrapper
    assert Path(wrapper).read_text(encoding="utf-8") == expected
    ran = subprocess.run([wrapper, "-c", "print('ok')"], capture_output=True, text=True, timeout=60, check=True)
    assert ran.stdout == "ok\n"
