"""Ordered modes on a real broker, checked message by message."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.consumer_fixtures import Recorder, consumer_config, create_topic, produce, unique, wait_until
from ykafka.consumer import Consumer

pytestmark = pytest.mark.broker("kafka")  # ordering across a group's members: Apache Kafka's group coordinator


def _run(bootstrap: str, running, tmp_path: Path, ordering: str, count: int = 600, keys: int = 30):
    topic, group = unique(f"ord-{ordering}"), unique("g")
    create_topic(bootstrap, topic, 3)
    where = produce(bootstrap, topic, count, keys=keys)
    recorder = Recorder(delay=0.002)
    consumer = Consumer(consumer_config(bootstrap, group, tmp_path, **{
        "consumer.workers": 8, "consumer.ordering": ordering}))
    job = running(consumer, recorder, [topic])
    wait_until(lambda: recorder.count() >= count, 90, message=f"{count} messages handled")
    job.stop()
    assert sorted(recorder.values) == list(range(count))  # none lost, none twice
    return recorder, where


def test_partition_ordering_keeps_offset_order_and_one_message_per_partition(bootstrap: str, running,
                                                                            tmp_path: Path) -> None:
    recorder, where = _run(bootstrap, running, tmp_path, "partition")
    for partition, values in recorder.by_partition.items():
        offsets = [where[v][1] for v in values]
        assert all(where[v][0] == partition for v in values)
        assert offsets == sorted(offsets), f"partition {partition} out of order"
    assert max(recorder.max_partition_active.values()) == 1
    assert len(recorder.threads) > 1  # partitions are spread over workers


def test_key_ordering_keeps_key_order_and_runs_keys_of_a_partition_in_parallel(bootstrap: str, running,
                                                                              tmp_path: Path) -> None:
    recorder, where = _run(bootstrap, running, tmp_path, "key")
    assert recorder.overlaps == []  # the same key never ran on two workers at once
    for key, values in recorder.by_key.items():
        assert values == sorted(values), f"key {key!r} out of order"
    assert max(recorder.max_partition_active.values()) > 1  # keys of one partition ran concurrently
