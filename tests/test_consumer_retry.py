"""Redelivery on a real broker: retry topics after the back-off (never before), then the DLQ with headers."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from tests.consumer_fixtures import (
    Recorder,
    committed,
    consumer_config,
    create_topic,
    produce,
    read_all,
    unique,
    wait_until,
)
from ykafka import headers as H
from ykafka.consumer import Consumer, dlq_topic, retry_topic


def test_failures_go_through_retry_topics_after_backoff_then_dlq(bootstrap: str, running, tmp_path: Path) -> None:
    topic, group = unique("retry"), unique("g")
    create_topic(bootstrap, topic, 2)
    where = produce(bootstrap, topic, 20, keys=4)
    failing = {0, 5, 10, 15}
    recorder = Recorder(fail=lambda m: int(m.value()) in failing)
    consumer = Consumer(consumer_config(bootstrap, group, tmp_path, **{
        "consumer.retry.backoff.ms": "1000,2000", "consumer.retry.max.attempts": 2, "consumer.dlq.enabled": True}))
    job = running(consumer, recorder, [topic])
    dlq = dlq_topic(group, topic)
    wait_until(lambda: consumer.engine.router is not None and consumer.engine.router.sent_dlq >= 4, 60,
               message="4 messages dead-lettered")
    job.stop()

    calls: dict[int, list[tuple[float, object]]] = defaultdict(list)
    for at, m in recorder.calls:
        calls[int(m.value())].append((at, m))
    assert sorted(recorder.values) == sorted(set(range(20)) - failing)  # successes exactly once
    for value in range(20):
        assert len(calls[value]) == (3 if value in failing else 1), value
    for value in failing:
        (t0, first), (t1, second), (t2, third) = calls[value]
        assert t1 - t0 >= 1.0 - 0.01, f"retry 1 of {value} came {t1 - t0:.3f}s after the failure"
        assert t2 - t1 >= 2.0 - 0.01, f"retry 2 of {value} came {t2 - t1:.3f}s after the failure"
        for m in (second, third):  # the handler sees the original coordinates on retries
            assert (m.topic(), m.partition(), m.offset()) == (topic, *where[value])
        assert H.get_int(second.headers(), H.ATTEMPT) == 1 and H.get_int(third.headers(), H.ATTEMPT) == 2

    assert sorted(int(m.value()) for m in read_all(bootstrap, retry_topic(group, topic, 1), 4)) == sorted(failing)
    assert sorted(int(m.value()) for m in read_all(bootstrap, retry_topic(group, topic, 2), 4)) == sorted(failing)
    dead = read_all(bootstrap, dlq, 4)
    assert sorted(int(m.value()) for m in dead) == sorted(failing)
    for m in dead:
        value = int(m.value())
        hdrs = m.headers()
        assert m.key() == f"k{value % 4}".encode()
        assert H.get_str(hdrs, H.MESSAGE_ID) == f"id-{value}"
        assert H.get_int(hdrs, H.ATTEMPT) == 3
        assert H.get_str(hdrs, H.ERROR) == f"RuntimeError: boom {value}"
        assert H.get_str(hdrs, H.ORIGINAL_TOPIC) == topic
        assert (H.get_int(hdrs, H.ORIGINAL_PARTITION), H.get_int(hdrs, H.ORIGINAL_OFFSET)) == where[value]
        assert H.get_int(hdrs, H.ORIGINAL_TIMESTAMP) is not None and H.get_int(hdrs, H.ORIGINAL_TIMESTAMP) > 0
        assert H.get_str(hdrs, H.GROUP) == group
        assert H.get(hdrs, H.NOT_BEFORE) is None

    ends: dict[int, int] = {}
    for partition, offset in where.values():
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    found = committed(bootstrap, group, topic, 2)
    assert {p: found[p] for p in ends} == ends  # every source offset done once its copy was acked


def test_zero_retries_dead_letters_at_once_and_dlq_off_gives_up(bootstrap: str, running, tmp_path: Path) -> None:
    topic, group = unique("retry0"), unique("g")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 6)
    recorder = Recorder(fail=lambda m: int(m.value()) < 3)
    consumer = Consumer(consumer_config(bootstrap, group, tmp_path, **{"consumer.retry.max.attempts": 0}))
    job = running(consumer, recorder, [topic])
    wait_until(lambda: consumer.engine.router is not None and consumer.engine.router.sent_dlq >= 3, 60,
               message="3 dead-lettered")
    consumer.apply({"consumer.dlq.enabled": False})
    produce(bootstrap, topic, 2, start=0)  # fail again, now with dead-lettering off
    wait_until(lambda: consumer.engine.router.given_up >= 2, 30, message="2 given up")
    job.stop()
    assert sorted(recorder.values) == [3, 4, 5]
    assert sorted(int(m.value()) for m in read_all(bootstrap, dlq_topic(group, topic), 3)) == [0, 1, 2]
    assert committed(bootstrap, group, topic, 1) == {0: 8}
