"""Back-pressure: a stuck partition is paused with a bounded window while the other partitions keep flowing."""

from __future__ import annotations

import threading
from pathlib import Path

from confluent_kafka import Message

from tests.consumer_fixtures import Recorder, consumer_config, create_topic, produce, unique, wait_until
from ykafka.consumer import Consumer
from ykafka.consumer import session as S


def test_stuck_partition_is_paused_with_a_bounded_window(bootstrap: str, running, tmp_path: Path) -> None:
    topic, group = unique("bp"), unique("g")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 300, partition=0)
    produce(bootstrap, topic, 300, partition=1, start=300)
    gate = threading.Event()
    recorder = Recorder()

    def handler(msg: Message) -> None:
        if msg.partition() == 0:
            gate.wait(60)  # partition 0 is stuck until released
        recorder(msg)

    consumer = Consumer(consumer_config(bootstrap, group, tmp_path, **{
        "consumer.workers": 2, "consumer.ordering": "partition", "ykafka.consumer.max.inflight.per.partition": 20}))
    running(consumer, handler, [topic])
    wait_until(lambda: recorder.count() >= 300, 60, message="partition 1 flows while partition 0 is stuck")
    engine = consumer.engine
    stuck = engine.trackers[(topic, 0)]
    assert set(recorder.by_partition) == {1}
    wait_until(lambda: consumer._session.paused_for((topic, 0), S.BACKPRESSURE), 10, message="partition 0 paused")
    assert stuck.inflight <= 40  # never more than twice the limit held for a stuck partition
    gate.set()
    wait_until(lambda: recorder.count() >= 600, 60, message="all handled after release")
    assert sorted(recorder.values) == list(range(600))
    assert recorder.by_partition[0] == list(range(300))  # and in order
