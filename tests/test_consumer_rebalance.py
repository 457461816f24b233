"""A second consumer joins while the first processes: revoked work finishes and commits before it moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.consumer_fixtures import Recorder, consumer_config, create_topic, produce, unique, wait_until
from ykafka.consumer import Consumer

pytestmark = pytest.mark.broker("kafka")  # consumer-group rebalances: Apache Kafka's group coordinator


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_rebalance_between_two_consumers_loses_and_repeats_nothing(bootstrap: str, running, tmp_path: Path,
                                                                    strategy: str) -> None:
    topic, group = unique("rebal"), unique("g")
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, 2000, keys=50)
    conf = consumer_config(bootstrap, group, tmp_path, **{
        "consumer.workers": 2, "consumer.ordering": "key", "consumer.assignment.strategy": strategy,
        "ykafka.consumer.max.inflight.per.partition": 40, "ykafka.consumer.retry.topics": False})
    first, second = Recorder(delay=0.01), Recorder(delay=0.01)
    a = Consumer(conf)
    running(a, first, [topic])
    wait_until(lambda: first.count() >= 200, 60, message="first consumer under way")
    b = Consumer(conf)
    running(b, second, [topic])
    wait_until(lambda: first.count() + second.count() >= 2000, 120, message="all 2000 handled")
    wait_until(lambda: len(a.assignment()) + len(b.assignment()) == 4, 30, message="settled assignment")
    assert a.client_config["partition.assignment.strategy"] == strategy
    handled = first.values + second.values
    assert sorted(handled) == list(range(2000))  # nothing lost, nothing handled twice
    assert second.count() > 0 and len(b.assignment()) > 0  # the newcomer got partitions and work
    # key order holds across the move: each key's values, merged by handling time, stay increasing
    calls = sorted(first.calls + second.calls, key=lambda call: call[0])
    per_key: dict[bytes | None, list[int]] = {}
    for _, m in calls:
        per_key.setdefault(m.key(), []).append(int(m.value()))
    assert all(values == sorted(values) for values in per_key.values())
