"""The failback sync job on real brokers: a topic the standby did not have when the job subscribed (the outage
began with ``start_offsets={}``) is still copied, every record once, when it appears there later."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer as RawProducer

from tests.dr_fixtures import read_all
from tests.helpers import unique
from ykafka.dr.sync import Outage, SyncJob

pytestmark = pytest.mark.broker("kafka")  # disaster recovery: the failback copy between two Kafka clusters


def test_sync_copies_a_topic_the_standby_created_after_the_job_subscribed(brokers: dict[str, str]) -> None:
    primary, standby = brokers["dc-a"], brokers["dc-b"]
    topic = unique("late-topic")
    done = threading.Event()
    job = SyncJob(Outage("dc-a", "dc-b", topic, started=time.time(), start_offsets={}),
                  {"bootstrap.servers": standby}, {"bootstrap.servers": primary},
                  standby_idle=lambda: True, on_done=lambda _job: done.set(), idle_s=1.0)
    try:
        time.sleep(3.0)  # the job's consumer subscribed while the standby has no such topic
        assert job.copied == 0
        # no create_topic: the first write auto-creates it, as the DR engine's first outage write does
        producer = RawProducer({"bootstrap.servers": standby, "linger.ms": 5})
        for i in range(50):
            producer.produce(topic, f"{i}".encode(), f"k{i % 5}".encode())
        assert producer.flush(30) == 0
        assert done.wait(60), job.status()
    finally:
        job.stop()
    assert job.copied == 50
    values = sorted(int(m.value()) for m in read_all(primary, topic, 50))
    assert values == list(range(50))
