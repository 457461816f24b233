"""A Spark standalone cluster on one host, from PySpark's own ``bin/spark-class``: the master and N workers, each
in its own session (a worker's executors and Python workers die with it) and recorded with its pid and command
line in ``<home>/cluster.json``, so ``down`` stops exactly what ``up`` started (docs/observability.md, "On a
Spark cluster"). ``ykafka pipeline cluster up|down|status`` and the tests use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests
import structlog

from ykafka.devstack.procs import free_port

log = structlog.get_logger("ykafka.pipeline.cluster")

STATE_FILE = "cluster.json"


class ClusterError(RuntimeError):
    """The cluster could not be started (with the daemon's log tail) or its state file is unreadable."""


@dataclass
class Daemon:
    """One JVM daemon: its role (``master`` / ``worker-<i>``), pid, the arguments it was started with (the deploy
    class and its options: the tail of both ``spark-class``'s and the JVM's command line, as spark-class execs
    java), log and web UI."""

    name: str
    pid: int
    args: list[str]
    log: str
    ui: str


@dataclass
class SparkCluster:
    """What ``up`` started: the master URL, its web UI and every daemon with its pid."""

    home: str
    master: str
    ui: str
    daemons: list[Daemon] = field(default_factory=list)

    def save(self) -> None:
        path = Path(self.home) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, home: Path) -> SparkCluster | None:
        path = home / STATE_FILE
        if not path.exists():
            return None
        try:
            raw = json.loads(path.read_text())
            return cls(home=raw["home"], master=raw["master"], ui=raw["ui"],
                       daemons=[Daemon(**d) for d in raw["daemons"]])
        except (ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"{path} is not a cluster state file ({exc})") from None

    def workers(self) -> list[Daemon]:
        return [d for d in self.daemons if d.name.startswith("worker-")]

    def alive_workers(self) -> int:
        """Workers the master lists as ALIVE (its /json/ endpoint)."""
        try:
            info = requests.get(self.ui + "/json/", timeout=5).json()
        except (requests.RequestException, ValueError):
            return 0
        return sum(1 for w in info.get("workers", []) if w.get("state") == "ALIVE")

    def status(self) -> dict[str, Any]:
        return {"master": self.master, "ui": self.ui, "alive_workers": self.alive_workers(),
                "daemons": [{"name": d.name, "pid": d.pid, "running": runs(d), "ui": d.ui, "log": d.log}
                            for d in self.daemons]}


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def runs(daemon: Daemon) -> bool:
    """The pid is alive and still runs what it was started with (not a reused pid)."""
    try:
        cmdline = [c.decode(errors="replace") for c in Path(f"/proc/{daemon.pid}/cmdline").read_bytes().split(b"\0")
                   if c]
    except OSError:
        return False
    return len(cmdline) > len(daemon.args) and cmdline[-len(daemon.args):] == daemon.args


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": os.environ.get("SPARK_DAEMON_MEMORY", "256m"),
            "SPARK_WORKER_DIR": str(home / "work"),
            # executors run the pipeline's Python parts: the same interpreter as the driver
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}


def _spawn(home: Path, name: str, args: list[str], ui_port: int) -> Daemon:
    """``spark-class`` execs the JVM, so the pid is the daemon's; its own session holds what it starts."""
    logfile = home / f"{name}.log"
    with logfile.open("ab") as out:
        proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=_env(home), start_new_session=True)
    return Daemon(name=name, pid=proc.pid, args=args, log=str(logfile), ui=f"http://127.0.0.1:{ui_port}")


def _exited(pid: int) -> bool:
    """Gone, or a zombie its parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _wait_ui(daemon: Daemon, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    gone = 0  # checks in a row that found the process not running what it was started with
    while time.monotonic() < deadline:
        try:
            if requests.get(daemon.ui + "/", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        # spark-class runs a launcher JVM first, then execs the daemon's: one look can fall between the two
        gone = 0 if runs(daemon) else gone + 1
        if gone >= 5:
            break
        time.sleep(0.3)
    tail = "\n".join(Path(daemon.log).read_text(errors="replace").splitlines()[-15:])
    state = "still running" if runs(daemon) else "exited" if _exited(daemon.pid) else "running something else"
    raise ClusterError(f"{daemon.name} (pid {daemon.pid}, {state}) did not come up within {timeout:.0f} s; "
                       f"its log ends:\n{tail or '(empty)'}")


def up(home: Path, workers: int = 2, cores: int = 1, memory: str = "512m", timeout: float = 90.0) -> SparkCluster:
    """Start a master and ``workers`` workers on loopback; returns once every worker registered."""
    home.mkdir(parents=True, exist_ok=True)
    existing = SparkCluster.load(home)
    if existing is not None and any(runs(d) for d in existing.daemons):
        raise ClusterError(f"a cluster from {home} is still running (master {existing.master}): stop it first")
    rpc, ui_port = free_port(), free_port()
    master = _spawn(home, "master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                                     str(rpc), "--webui-port", str(ui_port)], ui_port)
    cluster = SparkCluster(home=str(home), master=f"spark://127.0.0.1:{rpc}", ui=master.ui, daemons=[master])
    cluster.save()
    try:
        _wait_ui(master, timeout)
        for _ in range(workers):
            add_worker(cluster, cores=cores, memory=memory, timeout=timeout)
    except BaseException:
        down(home)
        raise
    log.info("ykafka.pipeline.cluster_up", master=cluster.master, workers=workers)
    return cluster


def add_worker(cluster: SparkCluster, cores: int = 1, memory: str = "512m", timeout: float = 90.0) -> Daemon:
    """One more worker, registered with the master before this returns."""
    home = Path(cluster.home)
    index = max((int(d.name.split("-")[1]) for d in cluster.workers()), default=-1) + 1
    ui_port = free_port()
    worker = _spawn(home, f"worker-{index}", ["org.apache.spark.deploy.worker.Worker", cluster.master, "--host",
                                              "127.0.0.1", "--webui-port", str(ui_port), "--cores", str(cores),
                                              "--memory", memory], ui_port)
    cluster.daemons.append(worker)
    cluster.save()
    _wait_ui(worker, timeout)
    expected = sum(1 for d in cluster.workers() if runs(d))
    deadline = time.monotonic() + timeout
    while cluster.alive_workers() < expected:
        if time.monotonic() > deadline:
            raise ClusterError(f"{worker.name} did not register with the master {cluster.master}")
        time.sleep(0.3)
    return worker


def kill(daemon: Daemon, sig: int = signal.SIGKILL) -> None:
    """Signal the daemon's whole session (its executors and their Python workers too), by its pid."""
    if runs(daemon):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, sig)


def down(home: Path, timeout: float = 15.0) -> list[str]:
    """Stop what ``up`` recorded (workers first), by pid; the state file goes only once nothing of it runs."""
    cluster = SparkCluster.load(home)
    if cluster is None:
        return []
    stopped = []
    for daemon in reversed(cluster.daemons):
        if not runs(daemon):
            continue
        kill(daemon, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while runs(daemon) and time.monotonic() < deadline:
            time.sleep(0.1)
        if runs(daemon):
            kill(daemon, signal.SIGKILL)
        stopped.append(daemon.name)
    if not any(runs(d) for d in cluster.daemons):
        (home / STATE_FILE).unlink(missing_ok=True)
    log.info("ykafka.pipeline.cluster_down", stopped=stopped)
    return stopped
