"""Consumer groups on Apache Kafka: a member joins and another leaves while the group processes, with the classic
protocol's ``cooperative-sticky`` assignor and with the new consumer protocol (KIP-848, ``group.protocol=consumer``,
whose broker assigns). Strict: every message handled exactly once, each key in order across both moves, and the
group's committed offsets are exactly the handled ones (each partition's last handled offset + 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.consumer_fixtures import Recorder, committed, consumer_config, create_topic, produce, unique, wait_until
from ykafka.consumer import Consumer

PARTITIONS, COUNT = 4, 2000


@pytest.mark.parametrize("protocol", ["cooperative-sticky", "consumer"])
def test_a_member_joins_and_one_leaves_nothing_lost_or_repeated_and_commits_are_exact(
        kafka_brokers: dict[str, str], running: Any, tmp_path: Path, protocol: str) -> None:
    bootstrap = kafka_brokers["dc-a"]
    topic, group = unique(f"k-groups-{protocol}"), unique("g")
    create_topic(bootstrap, topic, PARTITIONS)
    where = produce(bootstrap, topic, COUNT, keys=50)
    conf = consumer_config(bootstrap, group, tmp_path, **{
        "consumer.workers": 2, "consumer.ordering": "key", "ykafka.consumer.max.inflight.per.partition": 40,
        "ykafka.consumer.retry.topics": False})
    if protocol == "consumer":  # the broker owns the session timeout, the heartbeat and the assignor
        conf = {k: v for k, v in conf.items() if k not in ("session.timeout.ms", "heartbeat.interval.ms")}
        conf["group.protocol"] = "consumer"
    else:
        conf["consumer.assignment.strategy"] = protocol
    first, second = Recorder(delay=0.005), Recorder(delay=0.005)
    a, b = Consumer(conf), Consumer(conf)
    job_a = running(a, first, [topic])
    wait_until(lambda: first.count() >= 300, 60, message="the first member under way")
    running(b, second, [topic])  # joins: partitions move to it while the first keeps processing
    wait_until(lambda: second.count() > 0, 60, message="the second member got partitions and work")
    wait_until(lambda: first.count() + second.count() >= 1200, 60, message="1200 handled")
    job_a.stop()  # leaves: its partitions move to the second member after it committed what it handled
    wait_until(lambda: first.count() + second.count() >= COUNT, 90, message="all handled")
    if protocol == "consumer":
        assert not {"partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms"} \
            & set(b.client_config)
    else:
        assert b.client_config["partition.assignment.strategy"] == protocol
    handled = first.values + second.values
    assert sorted(handled) == list(range(COUNT))  # nothing lost, nothing handled twice
    calls = sorted(first.calls + second.calls, key=lambda call: call[0])
    per_key: dict[bytes | None, list[int]] = {}
    for _, m in calls:
        per_key.setdefault(m.key(), []).append(int(m.value()))
    assert all(values == sorted(values) for values in per_key.values())  # key order across both moves
    ends = {p: 1 + max((off for part, off in where.values() if part == p), default=-1) for p in range(PARTITIONS)}
    wait_until(lambda: committed(bootstrap, group, topic, PARTITIONS) == ends, 30,
               message=f"committed offsets equal to the handled ones {ends}")
