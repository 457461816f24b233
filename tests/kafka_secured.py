"""A secured one-node Apache Kafka for the broker-security tests (the ``kafka`` fixture of
tests/test_broker_security.py, test_broker_attacks.py and test_broker_security_live.py, and the plain-client
helpers they share): SASL_SSL (or SASL_PLAINTEXT) with
SCRAM-SHA-512, ``StandardAuthorizer``, no access without an ACL, the MetaServer's admin as super user (its
credential written at storage format time), the node's own inter-broker (SCRAM) and controller (SASL/PLAIN)
principals, no anonymous super user anywhere, certificates from ``ykafka.devstack.security``.

Started and stopped by pid; the jars are those ``make kafka`` resolved (``ykafka.devstack.kafka``).
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import KafkaError as RawKafkaError
from confluent_kafka import Producer as RawProducer
from confluent_kafka.admin import AdminClient, NewTopic

from ykafka.auth import GrantClient
from ykafka.devstack import free_port
from ykafka.devstack import kafka as devstack_kafka
from ykafka.devstack import security as kafka_security

if TYPE_CHECKING:
    from tests.ms_fixtures import App, MetaServer
    from ykafka.grants import Grant

ADMIN_USER = kafka_security.ADMIN_USER
BROKER_USER = kafka_security.BROKER_USER


@dataclass
class SecuredKafka:
    home: Path
    bootstrap: str
    protocol: str
    ca_pem: str | None
    admin_password: str
    reauth_ms: int
    proc: subprocess.Popen[bytes]
    controller_port: int = 0
    nodes: kafka_security.NodeSecrets | None = None

    def security(self) -> dict[str, Any]:
        """The registry entry's ``security`` (what ``PUT /v1/admin/clusters`` takes)."""
        return {"protocol": self.protocol, "mechanism": kafka_security.MECHANISM, "ca_pem": self.ca_pem}

    def client(self, username: str | None = None, password: str | None = None, **extra: Any) -> dict[str, Any]:
        """librdkafka settings of a client as ``username`` (default: the super user)."""
        props = {"bootstrap.servers": self.bootstrap,
                 **kafka_security.client_properties(protocol=self.protocol, username=username or ADMIN_USER,
                                                    password=(password or "") if username else self.admin_password,
                                                    ca_pem=self.ca_pem)}
        return {**props, **extra}

    def admin(self) -> AdminClient:
        return AdminClient(self.client())

    def create_topics(self, *names: str, partitions: int = 1) -> None:
        admin = self.admin()  # held until the futures resolve (a collected client destroys its handle)
        futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names], operation_timeout=20)
        for future in futures.values():
            future.result(30)

    def metaserver_env(self) -> dict[str, str]:
        return {"YKAFKA_MS_KAFKA_ADMIN_PASSWORD": self.admin_password}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _classpath() -> str:
    return f"{devstack_kafka.require_kafka()}/*"  # the jars `make kafka` resolved; KafkaMissing says how


def start(home: Path, protocol: str = "SASL_SSL", reauth_ms: int = 5000) -> SecuredKafka:
    home.mkdir(parents=True, exist_ok=True)
    port, controller = free_port(), free_port()
    password = secrets.token_urlsafe(18)
    nodes = kafka_security.node_secrets(home, "secured")
    tls = kafka_security.make_tls(home / "tls")
    props = {
        "process.roles": "broker,controller", "node.id": "1", "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listeners": f"CLIENT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"CLIENT://127.0.0.1:{port}",
        "listener.security.protocol.map": f"CLIENT:{protocol},CONTROLLER:{kafka_security.CONTROLLER_PROTOCOL}",
        "inter.broker.listener.name": "CLIENT", "controller.listener.names": "CONTROLLER",
        "log.dirs": str(home / "logs"), "num.partitions": "1", "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1", "transaction.state.log.num.partitions": "2",
        "group.initial.rebalance.delay.ms": "0", "num.network.threads": "2", "num.io.threads": "2",
        **kafka_security.broker_properties(listener="CLIENT", protocol=protocol, admin_user=ADMIN_USER,
                                           nodes=nodes, tls=tls, reauth_ms=reauth_ms),
    }
    config = home / "server.properties"
    config.touch(0o600)  # its JAAS lines hold the node's passwords
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    java = [devstack_kafka.java_binary(), "-Xmx384m", *devstack_kafka.JVM_ARGS, "-cp", _classpath()]
    argfile = devstack_kafka.write_argfile(home / ".format.args", [  # the passwords: never on the command line
        "kafka.tools.StorageTool", "format", "-t", "ykafkaSecurityTest0001", "-c", str(config),
        *kafka_security.format_scram_args(ADMIN_USER, password, nodes)])
    try:
        formatted = subprocess.run([*java, argfile], capture_output=True, text=True, timeout=120)
    finally:
        (home / ".format.args").unlink(missing_ok=True)
    if formatted.returncode != 0:
        raise RuntimeError(f"kafka-storage format failed: {formatted.stderr[-2000:]}")
    log = (home / "kafka.log").open("ab")
    proc = subprocess.Popen([*java, "kafka.Kafka", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    kafka = SecuredKafka(home, f"127.0.0.1:{port}", protocol, tls.ca_pem() if protocol == "SASL_SSL" else None,
                         password, reauth_ms, proc, controller, nodes)
    deadline = time.monotonic() + 90
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"kafka exited: {(home / 'kafka.log').read_text()[-3000:]}")
        try:
            kafka.admin().list_topics(timeout=2)
            return kafka
        except Exception:  # noqa: BLE001 - not up yet
            if time.monotonic() > deadline:
                kafka.stop()
                raise
            time.sleep(0.5)


def module_fixture(protocol: str, reauth_ms: int = 5000) -> Callable[..., Iterator[SecuredKafka]]:
    """A module-scoped ``kafka`` fixture: a secured Kafka on ``protocol`` started once for the module, stopped by
    pid at its end (``kafka = kafka_secured.module_fixture("SASL_SSL")`` in the module). Not one broker for the
    session: each module's MetaServer deletes, as foreign, the principals another MetaServer left on a broker it
    manages (docs/metaserver.md), and the modules run in different passes of ``make test`` (the live one is
    serial) and on different xdist workers, so a shared broker would start as often and add that cross-talk."""

    @pytest.fixture(scope="module")
    def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
        broker = start(tmp_path_factory.mktemp(f"kafka-{protocol.lower().replace('_', '-')}"), protocol, reauth_ms)
        try:
            yield broker
        finally:
            broker.stop()

    return kafka


def grant_of(server: MetaServer, app: App, tmp_path: Path) -> Grant:
    """The grant ``app`` gets from ``server`` (a one-off GrantClient with its own cache)."""
    client = GrantClient(server.url, app.app_id, app.secret, f"c-{uuid.uuid4().hex[:6]}", "10.0.0.1",
                         tmp_path / f"cache-{uuid.uuid4().hex[:6]}")
    try:
        return client.authenticate()
    finally:
        client.close()


def produce_raw(conf: dict[str, Any], topic: str, count: int = 3, timeout: float = 15.0) -> list[Any]:
    """Send ``count`` messages with a plain confluent-kafka Producer; the delivery errors (None: delivered)."""
    results: list[Any] = []
    producer = RawProducer({**conf, "message.timeout.ms": int(timeout * 1000) - 2000, "retries": 2})
    for i in range(count):
        producer.produce(topic, f"m{i}".encode(), on_delivery=lambda err, _msg: results.append(err))
    producer.flush(timeout)
    return results


def consume_raw(conf: dict[str, Any], topic: str, group: str, timeout: float = 15.0) -> tuple[int, Any]:
    """(messages read, first error) of a plain Consumer reading ``topic`` from the start in ``group`` (errors
    from a message or, for a refused authentication, from ``error_cb``)."""
    reported: list[Any] = []
    consumer = RawConsumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, "error_cb": reported.append})
    consumer.subscribe([topic])
    read, error = 0, None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and error is None:
            msg = consumer.poll(0.5)
            error = error or next((e for e in reported if e.code() != RawKafkaError._TRANSPORT), None)
            if msg is None:
                if read:
                    break
                continue
            failed = msg.error()
            if failed is not None:
                if failed.code() != RawKafkaError._PARTITION_EOF:
                    error = failed
                continue
            read += 1
    finally:
        consumer.close()
    return read, error
