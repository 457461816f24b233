"""Helpers for the consumer tests: topics, counted producers, a ykafka Consumer running in a thread.

Tests count every message end to end: values are ``<n>`` (0..N-1), so loss and duplication are checked
by comparing the handled values against ``range(N)``.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.helpers import create_topic as create_topic
from tests.helpers import unique as unique
from tests.helpers import wait_until as wait_until
from ykafka.consumer import Consumer


@pytest.fixture
def bootstrap(brokers: dict[str, str]) -> str:
    return brokers["dc-a"]


def produce(bootstrap: str, topic: str, count: int, keys: int | None = None, start: int = 0,
            partition: int | None = None, headers: bool = True) -> dict[int, tuple[int, int]]:
    """Produce values ``start..start+count-1`` (key ``k<i % keys>``); returns value -> (partition, offset)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    where: dict[int, tuple[int, int]] = {}

    def delivered(err: Any, msg: Message) -> None:
        assert err is None, err
        where[int(msg.value())] = (msg.partition(), msg.offset())

    for i in range(start, start + count):
        kwargs: dict[str, Any] = {"value": str(i).encode(), "on_delivery": delivered}
        if keys:
            kwargs["key"] = f"k{i % keys}".encode()
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = [("ykafka-id", f"id-{i}".encode())]
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0
    assert len(where) == count
    return where


def consumer_config(bootstrap: str, group: str, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        # a member that dies (tests/test_consumer_kill.py) is noticed in 6 s, on any broker
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "ykafka.cache.dir": str(tmp_path / "cache"),
        "ykafka.consumer.revoke.timeout.ms": 10000,
        "ykafka.consumer.commit.interval.ms": 200,
    }
    conf.update(extra)
    return conf


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    raw = RawConsumer({"bootstrap.servers": bootstrap, "group.id": group})  # reads offsets, never joins
    try:
        found = raw.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        raw.close()


def read_all(bootstrap: str, topic: str, expect: int, timeout: float = 30.0) -> list[Message]:
    """Read ``expect`` messages of a topic from the beginning (no group commits)."""
    raw = RawConsumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "auto.offset.reset": "earliest",
                       "enable.auto.commit": False})  # assigned: no group join
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
    raw.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    out: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expect and time.monotonic() < deadline:
            out += [m for m in raw.consume(500, 0.2) if m.error() is None]
        # anything beyond the expected count would be a duplicate: give it a moment to show up
        out += [m for m in raw.consume(500, 0.5) if m.error() is None]
    finally:
        raw.close()
    return out


@dataclass
class Recorder:
    """A thread-safe handler that records what it saw, in order, per partition and per key."""

    delay: float = 0.0
    fail: Callable[[Message], bool] | None = None
    values: list[int] = field(default_factory=list)
    by_partition: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    by_key: dict[bytes | None, list[int]] = field(default_factory=lambda: defaultdict(list))
    active_keys: dict[Any, int] = field(default_factory=lambda: defaultdict(int))
    active_partitions: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    overlaps: list[str] = field(default_factory=list)
    max_partition_active: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    threads: set[str] = field(default_factory=set)
    calls: list[tuple[float, Message]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, msg: Message) -> None:
        key = msg.key()
        part = msg.partition()
        with self.lock:
            self.calls.append((time.time(), msg))
            self.threads.add(threading.current_thread().name)
            self.active_keys[key] += 1
            self.active_partitions[part] += 1
            self.max_partition_active[part] = max(self.max_partition_active[part], self.active_partitions[part])
            if key is not None and self.active_keys[key] > 1:
                self.overlaps.append(f"key {key!r}")
        try:
            if self.delay:
                time.sleep(self.delay)
            if self.fail is not None and self.fail(msg):
                raise RuntimeError(f"boom {int(msg.value())}")
            with self.lock:
                value = int(msg.value())
                self.values.append(value)
                self.by_partition[part].append(value)
                self.by_key[key].append(value)
        finally:
            with self.lock:
                self.active_keys[key] -= 1
                self.active_partitions[part] -= 1

    def count(self) -> int:
        with self.lock:
            return len(self.values)


class Running:
    """A ykafka Consumer whose ``run`` executes in a background thread."""

    def __init__(self, consumer: Consumer, handler: Callable[[Message], Any], topics: Iterable[str]) -> None:
        self.consumer = consumer
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(handler, list(topics)), daemon=True)
        self.thread.start()

    def _run(self, handler: Callable[[Message], Any], topics: list[str]) -> None:
        try:
            self.consumer.run(handler, topics=topics)
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def stop(self, timeout: float = 30.0) -> None:
        self.consumer.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "consumer.run did not return after stop()"
        if self.error is not None:
            raise self.error

    def assigned(self) -> int:
        session = self.consumer._session
        return 0 if session.consumer is None else len(session.consumer.assignment())


@pytest.fixture
def running() -> Iterator[Callable[..., Running]]:
    """Start consumers in threads; stop and close every one at teardown."""
    started: list[Running] = []

    def start(consumer: Consumer, handler: Callable[[Message], Any], topics: Iterable[str]) -> Running:
        item = Running(consumer, handler, topics)
        started.append(item)
        return item

    yield start
    for item in started:
        try:
            if item.thread.is_alive():
                item.consumer.stop()
                item.thread.join(30)
        finally:
            item.consumer.close()
