"""Apache Kafka in the local stack (``ykafka.devstack.kafka``): the pinned release, one KRaft node and the
three-node cluster, each checked by what a client sees."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers import wait_until
from tests.support import ROOT, Broker
from ykafka.devstack import Stack, StackConfig, StackError, ephemeral_config, free_port, services
from ykafka.devstack.kafka import KAFKA_VERSION, new_cluster_id, server_properties


def test_the_pom_pins_the_release_the_launcher_runs() -> None:
    pom = (ROOT / "devstack" / "kafka" / "pom.xml").read_text()
    assert re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)[1] == KAFKA_VERSION  # type: ignore[index]


def _roundtrip(bootstrap: str, topic: str, count: int) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, str(i).encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        while len(got) < count:
            msg = consumer.poll(15)
            assert msg is not None, f"only {len(got)} of {count} read"
            if msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


class _RdkafkaLog(logging.Handler):
    """librdkafka's log lines of one client."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[str] = []
        self.logger = logging.getLogger(f"tests.rdkafka.{uuid.uuid4().hex}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    """The storage tool took ``--cluster-id -x...`` for a missing argument: a test run's cluster failed to format
    ("expected one argument"); one id in 64 starts with '-', so 2,000 draws would meet one about 31 times."""
    ids = [new_cluster_id() for _ in range(2000)]
    assert not [i for i in ids if i.startswith("-")] and all(len(i) == 22 for i in ids)


def test_one_node_keeps_what_it_acknowledged_across_a_sigkill(tmp_path: Path) -> None:
    cluster = Broker("solo", tmp_path, broker="kafka").start()
    try:
        # a fresh cluster is warmed by `up`: the first idempotent producer gets its id at once, with no
        # 'Coordinator load in progress' retry logged (the quickstart's first run printed three)
        logged = _RdkafkaLog()
        first = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "logger": logged.logger})
        first.produce("first", b"x")
        assert first.flush(30) == 0
        first.poll(0.2)
        assert [r for r in logged.records if "GETPID" in r or "load in progress" in r] == []
        sent = [str(i).encode() for i in range(50)]
        assert sorted(_roundtrip(cluster.bootstrap, "before", 50), key=int) == sent  # 3 partitions: auto-created
        cluster.kill()
        assert cluster.pids == [None]
        cluster.start()  # the same log.dirs, so the same cluster id and every record
        assert _roundtrip(cluster.bootstrap, "before", 0) == []
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "after",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["before"])
        seen = 0
        while seen < 50:
            msg = consumer.poll(15)
            assert msg is not None, f"{seen} of 50 acknowledged records survived"
            seen += msg.error() is None
        consumer.close()
        props = (cluster.stack.home / "data" / "kafka" / "solo" / "node-1" / "server.properties").read_text()
        assert "process.roles=broker,controller" in props and "min.insync.replicas=1" in props
    finally:
        cluster.close()
    assert cluster.pids == [None]


def test_three_nodes_replicate_every_topic_three_times_with_min_isr_two(kafka_cluster3: Broker) -> None:
    cluster = kafka_cluster3.ready()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = f"rf3-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 2)])[topic].result(30)
    meta = wait_until(lambda: (m := admin.list_topics(topic, timeout=10).topics[topic]).partitions and m,
                      message="the topic's metadata on the node asked")
    assert sorted(len(p.replicas) for p in meta.partitions.values()) == [3, 3]
    assert len(admin.list_topics(timeout=10).brokers) == 3
    spec = cluster.stack.cfg.clusters["k3"]
    props = server_properties(cluster.stack.cfg, spec, 0, cluster.stack.home)
    assert props["min.insync.replicas"] == "2" and props["default.replication.factor"] == "3"
    assert sorted(_roundtrip(cluster.bootstrap, topic, 20), key=int) == [str(i).encode() for i in range(20)]


def test_a_controller_port_given_to_another_service_is_refused_before_anything_starts(tmp_path: Path) -> None:
    cfg = ephemeral_config(tmp_path, broker="kafka")
    cfg.clusters["dc-b"].port = clash = cfg.clusters["dc-a"].quorum_ports[0]
    with pytest.raises(StackError, match=rf"ports used twice: {clash} by dc-b, dc-a \(controller\)"):
        Stack(cfg).up()
    assert not (tmp_path / "run").exists() or not list((tmp_path / "run").glob("*.pid"))



def test_clusters_given_ports_100_apart_are_told_how_to_set_the_controller_port_and_the_flag_works(
        tmp_path: Path) -> None:
    """``--dc-a-port 41092 --dc-b-port 41192``: dc-a's controller would take 41192 (its port + 100). The refusal
    names the flag that moves it, and with the flag the same ports pass the check (nothing started here)."""
    from click.testing import CliRunner

    from ykafka.cli import main

    home = tmp_path / "home"
    env = {"YKAFKA_DEV_BROKER": "kafka", "YKAFKA_DEV_HOME": str(home)}
    refused = CliRunner().invoke(main, ["dev", "up", "--dc-a-port", "41092", "--dc-b-port", "41192"], env=env)
    assert refused.exit_code != 0
    assert "ports used twice: 41192 by dc-b, dc-a (controller)" in refused.output, refused.output
    assert "--dc-a-controller-port PORT" in refused.output and "YKAFKA_DEV_DC_A_CONTROLLER_PORT" in refused.output
    assert "--dc-a-controller-port" in CliRunner().invoke(main, ["dev", "up", "--help"]).output
    cfg = StackConfig.load(None, env={**env}, home=home, **{"dc-a_port": 41092, "dc-b_port": 41192,
                                                            "dc-a_controller_port": 41300})
    assert cfg.clusters["dc-a"].quorum_ports == [41300 + i for i in range(cfg.clusters["dc-a"].brokers)]
    Stack(cfg)._check_ports()


def test_a_node_that_exits_at_start_is_reported_as_exited_with_its_logs_reason_at_once(tmp_path: Path) -> None:
    """A Kafka node whose controller port another process holds exits within seconds: ``up`` says it exited and
    why (the JVM's 'Address already in use'), instead of waiting out the start-up timeout."""
    import socket
    import time

    cfg = ephemeral_config(tmp_path, broker="kafka")
    cfg.startup_timeout_s = 300
    held = socket.socket()
    held.bind(("127.0.0.1", cfg.clusters["dc-a"].quorum_ports[0]))
    held.listen()
    stack = Stack(cfg)
    began = time.monotonic()
    try:
        with pytest.raises(StackError) as failed:
            stack.up(["dc-a"], seed=False)
    finally:
        held.close()
        stack.down()
    text = str(failed.value)
    assert text.startswith("dc-a (pid ") and " exited with code " in text and "before answering on port" in text, text
    assert "Address already in use" in text.splitlines()[0], text
    assert time.monotonic() - began < cfg.startup_timeout_s / 2  # not the timeout's 'did not answer' path


def test_free_ports_handed_to_a_live_process_are_not_handed_to_another() -> None:
    """CI: a Kafka node of one xdist worker found its port taken by another process's broker, handed the same free
    port while neither listened yet (a JVM binds seconds after its port is chosen)."""
    child = subprocess.Popen([sys.executable, "-c", "import sys\nfrom ykafka.devstack import free_port\n"
                              "print(' '.join(str(free_port()) for _ in range(1500)), flush=True)\nsys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        theirs = set(map(int, child.stdout.readline().split()))
        ours = {free_port() for _ in range(1500)}
        assert len(theirs) == 1500 and len(ours) == 1500 and not theirs & ours
    finally:
        child.communicate("", timeout=30)
    assert child.returncode == 0


def test_free_ports_of_one_process_are_never_handed_out_twice(tmp_path: Path) -> None:
    """CI once gave a stack's metaserver and another cluster's controller the same port: nothing listened on either
    yet, so the bind check alone passed both."""
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == 500
    cfg = ephemeral_config(tmp_path, broker="kafka", brokers=3)
    every = [svc.port for svc in services(cfg)] + [p for spec in cfg.clusters.values() for p in spec.quorum_ports]
    assert len(every) == len(set(every)) and not set(every) & set(ports)


def test_a_clusters_id_is_written_once_when_its_nodes_are_prepared_at_the_same_time(tmp_path: Path) -> None:
    """CI: the three nodes of k3, prepared in parallel, each wrote a cluster id of its own (exists, then write),
    formatted three clusters and never formed a quorum (INCONSISTENT_CLUSTER_ID)."""
    import threading

    from ykafka.devstack.kafka import _create_once

    path = tmp_path / "cluster.id"
    start = threading.Barrier(16)
    seen: list[str] = []

    def prepare(n: int) -> None:
        start.wait()
        _create_once(path, f"id-{n}")
        seen.append(path.read_text())

    threads = [threading.Thread(target=prepare, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 16 and len(set(seen)) == 1 and seen[0].startswith("id-")
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.id"]  # no temporary file left


def test_a_failed_up_stops_what_it_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI: k3's third node never answered and its two peers ran on, electing leaders, for the rest of the run. An
    ``up`` that fails stops (by pid) the processes it started; here the second broker is made not to answer."""
    from ykafka import devstack
    from ykafka.devstack.procs import pid_alive

    stack = Stack(ephemeral_config(tmp_path, broker="tansu"))
    real = devstack.Stack._wait_healthy
    pids: dict[str, int] = {}

    def wait(self: devstack.Stack, svc: devstack.Service, pid: int) -> None:
        pids[svc.name] = pid
        if svc.name == "dc-b":
            raise StackError("dc-b did not answer (injected)")
        real(self, svc, pid)

    monkeypatch.setattr(devstack.Stack, "_wait_healthy", wait)
    with pytest.raises(StackError, match="injected"):
        stack.up(["dc-a", "dc-b"], seed=False)
    assert set(pids) == {"dc-a", "dc-b"} and not any(pid_alive(pid) for pid in pids.values())
    assert not any(stack.status()["running"].values())
