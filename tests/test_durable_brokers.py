"""Durable Tansu brokers: the S3 storage engine on a local moto S3 server (issue #17 §1).

Checks by hand-sized numbers what the durable test bed relies on: acknowledged messages (acks=all, idempotence)
survive a SIGKILL of every broker, and two brokers on one bucket serve the same data, in per-key order.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.helpers import create_topic, unique, wait_until
from ykafka.devstack import free_port, port_open, tansu_binary

pytest.importorskip("moto", reason="moto[server] is needed for the durable (S3) brokers")
boto3 = pytest.importorskip("boto3")

AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
       "AWS_ALLOW_HTTP": "true"}


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        proc.wait(10)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server on a free port (stopped by its pid) with one bucket; yields the endpoint."""
    port = free_port()
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("wb")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: port_open("127.0.0.1", port), 20, message="moto_server")
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                     region_name="us-east-1").create_bucket(Bucket="tansu")
        yield endpoint
    finally:
        _stop(proc)
        log.close()


class DurableBroker:
    """One Tansu process on the S3 engine; ``kill()`` is SIGKILL, ``start()`` restarts it on the same port."""

    def __init__(self, endpoint: str, cluster: str, log: Path) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.endpoint, self.cluster, self.log = endpoint, cluster, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DurableBroker:
        url = f"tcp://{self.bootstrap}"
        env = {**os.environ, **AWS, "AWS_ENDPOINT": self.endpoint}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([tansu_binary(), "broker", "--listener-url", url,
                                          "--advertised-listener-url", url, "--storage-engine", "s3://tansu/",
                                          "--cluster-id", self.cluster], env=env, stdout=out, stderr=out)
        wait_until(lambda: port_open("127.0.0.1", self.port), 20, message=f"tansu on {self.port}")
        return self

    def kill(self) -> None:
        assert self.proc is not None
        _stop(self.proc, signal.SIGKILL)


@pytest.fixture()
def brokers(s3: str, tmp_path: Path) -> Iterator[list[DurableBroker]]:
    cluster = unique("durable")
    started = [DurableBroker(s3, cluster, tmp_path / f"tansu-{i}.log").start() for i in range(2)]
    yield started
    for broker in started:
        if broker.proc is not None:
            _stop(broker.proc)


def _produce(bootstrap: str, topic: str, count: int) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    acked = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal acked
        acked += err is None

    for i in range(count):
        producer.produce(topic, key=f"k{i % 16}", value=str(i).encode(), on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    return acked


def _read_all(bootstrap: str, topic: str, expected: int) -> list[tuple[str, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"), "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])  # no group join: faster
    seen: list[tuple[str, int]] = []
    try:
        def done() -> bool:
            for msg in consumer.consume(500, 1.0):
                if msg.error() is None:
                    seen.append(((msg.key() or b"").decode(), int(msg.value())))
            return len(seen) >= expected
        wait_until(done, 60, interval=0, message=f"{expected} messages from {bootstrap}")
    finally:
        consumer.close()
    return seen


def _check_exact(seen: list[tuple[str, int]], count: int) -> None:
    values = [v for _, v in seen]
    assert len(values) == count and set(values) == set(range(count)), "lost or duplicated"  # lost = dup = 0
    last: dict[str, int] = {}
    for key, value in seen:  # per-key order: each key's values arrive increasing
        assert value > last.get(key, -1), f"key {key} out of order"
        last[key] = value


def test_acked_messages_survive_sigkill_of_every_broker_and_both_brokers_serve_them(
        brokers: list[DurableBroker]) -> None:
    first, second = brokers
    topic = unique("durable")
    create_topic(first.bootstrap, topic, partitions=3)
    count = 3000
    assert _produce(first.bootstrap, topic, count) == count
    for broker in brokers:
        broker.kill()
    for broker in brokers:
        broker.start()
    _check_exact(_read_all(first.bootstrap, topic, count), count)
    _check_exact(_read_all(second.bootstrap, topic, count), count)  # the other broker on the same bucket
