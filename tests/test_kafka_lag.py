"""The pipeline's Burrow-style lag rules on Apache Kafka: one group goes through the phases of
docs/observability.md ("Burrow and the pipeline on one cluster"), sampled by the pipeline's own sampler from the
broker (committed offsets, end offsets, live members), and each phase's window judged by ``pipeline.burrow``."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition

from pipeline.burrow import Sample, Verdict, evaluate
from pipeline.lag_sampler import LagSampler
from tests.helpers import create_topic, unique, wait_until


def test_a_group_healthy_then_stuck_then_slow_then_idle_then_gone(kafka_brokers: dict[str, str]) -> None:
    bootstrap = kafka_brokers["dc-a"]
    topic, group = unique("k-lag"), unique("k-lag-g")
    create_topic(bootstrap, topic, 1)
    tp = TopicPartition(topic, 0)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    sampler = LagSampler(bootstrap, "dc-a")
    committed = [0]

    def write(n: int) -> None:
        for _ in range(n):
            producer.produce(topic, b"x")
        assert producer.flush(10) == 0

    def read(n: int | None) -> None:
        """Handle up to ``n`` messages (None: all there are) and commit what was handled."""
        while n is None or n > 0:
            msgs = consumer.consume(n or 100, 1.0)
            if not msgs:
                break
            for m in msgs:
                assert m.error() is None, m.error()
                committed[0] = m.offset() + 1
            n = None if n is None else n - len(msgs)
        consumer.commit(offsets=[TopicPartition(topic, 0, committed[0])], asynchronous=False)

    def phase(step: Callable[[], None], live: bool = True) -> Verdict:
        window = []
        for _ in range(5):
            step()
            if live:
                consumer.poll(0.05)  # a member that keeps polling: alive for the group coordinator
            rows = [r for r in sampler.sample([group], {group: [topic]}) if r["topic"] == topic]
            assert len(rows) == 1, rows
            row = rows[0]
            window.append(Sample(row["ts"], row["committed"], row["end_offset"], int(row["value"]), row["count"] > 0))
            time.sleep(0.02)
        return evaluate(window)

    try:
        consumer.subscribe([topic])
        wait_until(lambda: bool(consumer.poll(0.2) or consumer.assignment()), 60, message="assigned")
        verdicts = {
            "healthy": phase(lambda: (write(20), read(None))),  # keeps up: lag back to 0 each time
            "stuck": (consumer.pause([tp]), phase(lambda: write(20)))[1],  # alive, no commit, lag grows
            "slow": (consumer.resume([tp]), phase(lambda: (write(40), read(10))))[1],  # commits move, lag grows
            "idle": (consumer.pause([tp]), phase(lambda: None))[1],  # nothing new, nothing committed
        }
        consumer.close()  # the member leaves: commits frozen, nobody in the group
        verdicts["gone"] = phase(lambda: None, live=False)
    finally:
        sampler.close()
    statuses = {name: v.status for name, v in verdicts.items()}
    print("pipeline lag statuses on Kafka:", statuses, {n: v.reason for n, v in verdicts.items()})
    assert statuses == {"healthy": "OK", "stuck": "ERR", "slow": "WARN", "idle": "STALL", "gone": "STOP"}, verdicts
