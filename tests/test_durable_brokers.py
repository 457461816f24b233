"""Durable Tansu brokers: the S3 storage engine on a local moto S3 server (issue #17 §1).

Checks by hand-sized numbers what the durable test bed relies on: acknowledged messages (acks=all, idempotence)
survive a SIGKILL of every broker, and two brokers on one bucket serve the same data, in per-key order.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tests.helpers import create_topic, unique, wait_until
from ykafka.devstack import Stack, _pid_alive, ephemeral_config

pytest.importorskip("moto", reason="moto[server] (dev extra) is needed for the durable (S3) brokers")

@pytest.fixture()
def stack(tmp_path: Path) -> Iterator[Stack]:
    """Cluster dc-a durable with two brokers and the local S3 server, as ``ykafka dev up --storage durable``
    starts them (no config service / MetaServer: not needed here); stopped by pid."""
    stack = Stack(ephemeral_config(tmp_path / "stack", storage="durable"))
    try:
        stack.up(["s3", "dc-a", "dc-a-b2"], seed=False)
        yield stack
    finally:
        stack.down()


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


def test_acked_messages_survive_sigkill_of_every_broker_and_both_brokers_serve_them(stack: Stack) -> None:
    status = stack.status()
    brokers = status["brokers"]["dc-a"]["brokers"]
    assert status["brokers"]["dc-a"]["storage"] == "durable" and [b["name"] for b in brokers] == ["dc-a", "dc-a-b2"]
    assert all(b["pid"] for b in brokers) and status["clusters"]["dc-a"] == ",".join(b["address"] for b in brokers)
    first, second = (b["address"] for b in brokers)
    topic = unique("durable")
    create_topic(first, topic, partitions=3)
    count = 3000
    assert _produce(first, topic, count) == count
    for broker in brokers:
        stack.kill(broker["name"])
    assert not any(b["pid"] for b in stack.status()["brokers"]["dc-a"]["brokers"])
    stack.up(["dc-a", "dc-a-b2"], seed=False)
    _check_exact(_read_all(first, topic, count), count)
    _check_exact(_read_all(second, topic, count), count)  # the other broker on the same bucket


def test_down_stops_every_broker_and_the_s3_server(tmp_path: Path) -> None:
    stack = Stack(ephemeral_config(tmp_path / "stack", storage="durable"))
    stack.up(["s3", "dc-a", "dc-a-b2"], seed=False)
    pids = [b["pid"] for b in stack.status()["brokers"]["dc-a"]["brokers"]] + [stack.status()["running"]["s3"]]
    later = copy.deepcopy(stack.cfg)
    later.set_storage("memory")  # a later `ykafka dev down` has no --storage: the stack remembers its layout
    again = Stack(later)
    stopped = again.down()
    assert sorted(stopped.values()) == sorted(pids)
    assert not any(_pid_alive(pid) for pid in pids)
