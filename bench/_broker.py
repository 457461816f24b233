"""Broker helpers of the profile drivers and the callgrind budget: a private Tansu broker held for
``--broker-only`` (started on a free port, its bootstrap printed, stopped by pid when this process is told to stop:
SIGTERM or Ctrl-C), and ``fill``, which puts the consumer loops' messages on a topic (one helper, so every driver
reads the same records: 100-byte values, keys ``i % 1000``)."""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from pathlib import Path


def fill(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions and put ``count`` messages on it (raw confluent-kafka: the
    fill must not be what a profile measures); raises if they are not all acknowledged within 120 s."""
    from confluent_kafka import Producer as RawProducer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        future.result(30)
    producer = RawProducer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
    pad = b"x" * 92
    for i in range(count):
        while True:
            try:
                producer.produce(topic, key=str(i % 1000).encode(), value=pad + i.to_bytes(8, "big"))
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("could not fill the topic")


def hold_broker(name: str) -> None:
    """Start a broker, print its bootstrap, keep it until SIGTERM / SIGINT, then stop it by pid."""
    from tests.support import Broker

    broker = Broker(name, Path(tempfile.mkdtemp(prefix="ykafka-prof-"))).start()
    print(broker.bootstrap, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill PID` stops the broker too
    try:
        while True:
            time.sleep(3600)
    finally:
        broker.kill()
