"""Framework mode end to end on a real broker: every message handled once, offsets committed to the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.consumer_fixtures import Recorder, committed, consumer_config, create_topic, produce, unique, wait_until
from ykafka.consumer import Consumer

pytestmark = pytest.mark.broker("kafka")  # consumer groups and committed offsets: Apache Kafka's group coordinator


def test_run_handles_every_message_once_and_commits_the_end(bootstrap: str, running, tmp_path: Path) -> None:
    topic, group = unique("basic"), unique("g")
    create_topic(bootstrap, topic, 4)
    where = produce(bootstrap, topic, 400, keys=20)
    recorder = Recorder()
    consumer = Consumer(consumer_config(bootstrap, group, tmp_path, **{"consumer.workers": 4,
                                                                        "consumer.ordering": "none"}))
    job = running(consumer, recorder, [topic])
    wait_until(lambda: recorder.count() >= 400, 60, message="400 messages handled")
    job.stop()
    assert sorted(recorder.values) == list(range(400))
    ends = {p: 0 for p in range(4)}
    for partition, offset in where.values():
        ends[partition] = max(ends[partition], offset + 1)
    assert committed(bootstrap, group, topic, 4) == ends
