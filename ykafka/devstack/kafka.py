"""Apache Kafka brokers of the local stack: real KRaft processes (``java -cp <libs>/* kafka.Kafka``).

The jars come from Maven Central through the repository's ``devstack/kafka/pom.xml`` (``make kafka`` resolves
them once, checksums verified, into :func:`kafka_libs`, a cache outside the checkout). A cluster of ``n`` nodes
runs every node in combined mode (broker and controller; a static quorum of all ``n`` on loopback); its storage
(``log.dirs``, one folder per node under the stack's home) is formatted once with a cluster id kept beside it,
so a restarted broker keeps what it acknowledged. :mod:`ykafka.devstack.services` builds the :class:`Service` of each
node through :func:`kafka_services`; everything Kafka-specific lives here.

Hook for listeners and security (``ClusterSpec.kafka``, a :class:`KafkaSettings`): extra listeners with their
own protocol and ports, properties merged last into every node's ``server.properties``, extra arguments to the
storage format (``--add-scram ...``), extra JVM arguments and environment (a JAAS file), and which listener the
cluster's bootstrap address names (:func:`client_listener`).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from ykafka.devstack.config import (
    CLIENT,
    CONTROLLER,
    ClusterSpec,
    KafkaSettings,
    StackConfig,
    client_listener,
)
from ykafka.devstack.procs import Service, StackError, log_tail

log = structlog.get_logger(__name__)

#: the pinned release; devstack/kafka/pom.xml names the same (tests/test_devstack_kafka.py checks they agree)
KAFKA_VERSION = "4.1.1"
#: the broker's heap: enough for the suite's and the demo's traffic, small enough for 2-node stacks on a 2-core,
#: 24 GB machine (docs/deployment.md: start time and RSS measured at this figure)
#: start-up over peak speed: a small heap needs no concurrent collector, and one JVM class-data archive
#: (C1 only: a third less CPU to start, docs/deployment.md; ``KafkaSettings.jvm_args`` comes later and wins)
JVM_ARGS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true"]
#: how long a node may take to answer: seconds when the machine is idle, much longer when a 2-core machine runs
#: the suite and a node recovers its logs after a SIGKILL
STARTUP_TIMEOUT_S = 120.0

LOG4J2 = """\
# the broker logs to stdout, which the stack sends to the node's log file (logs/<name>.log)
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
logger.loader.name = org.apache.kafka.storage.internals.log
logger.loader.level = WARN
logger.logmanager.name = kafka.log.LogManager
logger.logmanager.level = WARN
"""


class KafkaMissing(RuntimeError):
    """Java or the broker's jars are not there; the message says how to get them."""


def kafka_libs() -> Path:
    """Where ``make kafka`` put the broker's jars: ``$YKAFKA_KAFKA_LIBS``, else
    ``~/.cache/ykafka/kafka-<version>/libs`` (the Makefile's default too)."""
    configured = os.environ.get("YKAFKA_KAFKA_LIBS")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "ykafka" / f"kafka-{KAFKA_VERSION}" / "libs"


def java_binary() -> str:
    home = Path(os.environ.get("JAVA_HOME") or "/nonexistent") / "bin" / "java"
    found = str(home) if home.exists() else shutil.which("java")
    if not found:
        raise KafkaMissing("the Kafka broker needs Java 17 or newer: install it (e.g. apt-get install "
                           "openjdk-17-jre-headless)")
    return found


def require_kafka() -> Path:
    """The jars folder, or :class:`KafkaMissing` with the command that resolves it."""
    libs = kafka_libs()
    if not (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        raise KafkaMissing(f"Apache Kafka {KAFKA_VERSION} is not in {libs}: run `make kafka` in the ykafka "
                           "checkout (Maven resolves it from Maven Central; needs mvn and Java 17)")
    return libs


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID, base64url without padding (what ``kafka-storage random-uuid`` prints).
    Never one starting with '-' (one in 64 would): the storage tool reads ``--cluster-id -x...`` as a missing
    argument ("expected one argument"), so Kafka's own ``Uuid.randomUuid`` draws again too."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def cluster_dir(home: Path, spec: ClusterSpec) -> Path:
    return home / "data" / "kafka" / spec.name


def node_dir(home: Path, spec: ClusterSpec, index: int) -> Path:
    return cluster_dir(home, spec) / f"node-{index + 1}"


def server_properties(cfg: StackConfig, spec: ClusterSpec, index: int, home: Path) -> dict[str, str]:
    """Node ``index`` (node id ``index + 1``) of ``spec``: broker and controller in one process, every listener on
    the stack's host; replication sized to the cluster (3 nodes: RF 3, ``min.insync.replicas=2``)."""
    host, n = cfg.host, spec.brokers
    settings = spec.kafka
    listeners = [(CLIENT, settings.protocol, spec.ports[index]),
                 *((lst.name, lst.protocol, lst.ports[index]) for lst in settings.listeners)]
    voters = ",".join(f"{i + 1}@{host}:{port}" for i, port in enumerate(spec.quorum_ports))
    replication = str(min(n, 3))
    props = {
        "process.roles": "broker,controller",
        "node.id": str(index + 1),
        "controller.quorum.voters": voters,
        "listeners": ",".join([*(f"{name}://{host}:{port}" for name, _, port in listeners),
                               f"{CONTROLLER}://{host}:{spec.quorum_ports[index]}"]),
        "advertised.listeners": ",".join(f"{name}://{host}:{port}" for name, _, port in listeners),
        "listener.security.protocol.map": ",".join([*(f"{name}:{proto}" for name, proto, _ in listeners),
                                                    f"{CONTROLLER}:{settings.controller_protocol}"]),
        "controller.listener.names": CONTROLLER,
        "inter.broker.listener.name": CLIENT,
        "log.dirs": str(node_dir(home, spec, index) / "logs"),
        "num.partitions": "3",  # an auto-created topic spreads keys (the demo's hot_producer shows it), as on Tansu
        "default.replication.factor": replication,
        "min.insync.replicas": "2" if n >= 3 else "1",
        "offsets.topic.replication.factor": replication,
        "offsets.topic.num.partitions": "8",  # the default 50 costs seconds at the first group's join
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": "2" if n >= 3 else "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": "2" if n >= 3 else "1",
        "group.initial.rebalance.delay.ms": "0",  # a test's first consumer is assigned at once
        "auto.create.topics.enable": "true",
        "log.flush.interval.messages": str(2**63 - 1),  # Kafka's default: durability by replication, not fsync
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "log.cleaner.threads": "1",
        "background.threads": "4",
    }
    props.update(settings.properties)
    return props


def _write_properties(path: Path, props: dict[str, str]) -> None:
    """Write ``path`` 0600 from its first byte: a secured node's JAAS lines hold its passwords."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file made 0644 by an older stack gets tightened too
    with os.fdopen(fd, "w") as out:
        out.write("".join(f"{key}={value}\n" for key, value in props.items()))


def _jvm(settings: KafkaSettings, home: Path) -> list[str]:
    return [java_binary(), f"-Xmx{settings.heap}", *JVM_ARGS,
            f"-Dlog4j2.configurationFile={home / 'data' / 'kafka' / 'log4j2.properties'}",
            *settings.jvm_args, "-cp", f"{require_kafka()}/*"]


def write_argfile(path: Path, args: list[str]) -> str:
    """Write a JVM argument file (``java @file``: the main class and its arguments, one quoted per line) 0600 and
    return the ``@path`` argument. Arguments that carry secrets (``--add-scram ...password=...``) go there, never on
    the command line, where every local user's ``ps`` reads them."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("".join('"' + a.replace("\\", "\\\\").replace('"', '\\"') + '"\n' for a in args))
    return f"@{path}"


def _create_once(path: Path, text: str) -> None:
    """Write ``path`` whole unless it exists, atomically: the nodes of a cluster are prepared in parallel, and two
    nodes that each wrote a cluster id of their own formatted two clusters (INCONSISTENT_CLUSTER_ID, no quorum:
    CI's three-node start hung until its 120 s timeout)."""
    if path.exists():
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text)
    try:
        os.link(tmp, path)  # fails if another thread or process created it first: theirs stands
    except FileExistsError:
        pass
    finally:
        tmp.unlink()


def format_storage(cfg: StackConfig, spec: ClusterSpec, home: Path, indexes: list[int] | None = None) -> list[int]:
    """Write each node's server.properties and format the storage of those not formatted yet (in parallel, one
    JVM each), all with the cluster's id (created at the first format, kept in ``cluster.id``). Returns the
    indexes formatted now."""
    log4j = home / "data" / "kafka" / "log4j2.properties"
    log4j.parent.mkdir(parents=True, exist_ok=True)
    _create_once(log4j, LOG4J2)
    id_file = cluster_dir(home, spec) / "cluster.id"
    id_file.parent.mkdir(parents=True, exist_ok=True)
    _create_once(id_file, new_cluster_id())
    cluster_id = id_file.read_text().strip()
    todo = []
    for index in range(spec.brokers) if indexes is None else indexes:
        config = node_dir(home, spec, index) / "server.properties"
        _write_properties(config, server_properties(cfg, spec, index, home))
        if not (node_dir(home, spec, index) / "logs" / "meta.properties").exists():
            todo.append(index)

    def run(index: int) -> None:
        out = node_dir(home, spec, index) / "format.log"
        args = node_dir(home, spec, index) / ".format.args"  # the SCRAM passwords: in a 0600 file, not in `ps`
        argv = [*_jvm(spec.kafka, home), write_argfile(args, [
            "kafka.tools.StorageTool", "format", "--cluster-id", cluster_id,
            "--config", str(node_dir(home, spec, index) / "server.properties"), "--ignore-formatted",
            *spec.kafka.format_args])]
        try:
            with out.open("wb") as fh:
                done = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      timeout=120, env={**os.environ, **spec.kafka.env})
        finally:
            args.unlink(missing_ok=True)
        if done.returncode:
            raise StackError(f"formatting {spec.broker_name(index)}'s storage failed; {out}:\n{log_tail(out)}")

    with ThreadPoolExecutor(max(1, len(todo))) as pool:
        list(pool.map(run, todo))
    if todo:
        log.info("kafka.storage.formatted", cluster=spec.name, nodes=[i + 1 for i in todo], cluster_id=cluster_id)
    return todo


def kafka_services(cfg: StackConfig, spec: ClusterSpec, home: Path,
                   service: Callable[..., Service]) -> list[Service]:
    """One :class:`Service` per node; starting one first formats what is not formatted (``prepare``). Every Kafka
    node of the stack starts and stops together (``group``): a quorum of 3 answers only once 2 run, and a quorum
    stopped node by node leaves the last one waiting for its lost majority; two clusters boot in parallel."""
    try:
        base = _jvm(spec.kafka, home)
    except KafkaMissing as exc:
        raise StackError(str(exc)) from None
    _, ports = client_listener(spec)
    out = []
    for index in range(spec.brokers):
        config = node_dir(home, spec, index) / "server.properties"

        def prepare(index: int = index) -> None:
            format_storage(cfg, spec, home, [index])

        out.append(service(spec.broker_name(index), [*base, "kafka.Kafka", str(config)], ports[index],
                           env=dict(spec.kafka.env), prepare=prepare, group="kafka", kind="kafka",
                           node_id=index + 1, startup_timeout_s=STARTUP_TIMEOUT_S))
    return out
