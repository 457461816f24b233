"""Helpers every test module shares: unique names, waiting for a condition, creating a topic on a real broker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05,
               message: str = "condition") -> Any:
    """The predicate's first truthy value; checked once more at the deadline, then an AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def create_topic(bootstrap: str, topic: str, partitions: int = 3, exact: bool = True) -> None:
    """Create ``topic`` and wait until it is visible with ``partitions`` partitions; ``exact=False`` also accepts
    it already there with another count (auto-created first by a producer, with the broker's default)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                      operation_timeout=10).values():
        try:
            future.result(15)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    def visible() -> bool:
        found = admin.list_topics(topic, timeout=5).topics.get(topic)
        return (found is not None and found.error is None and bool(found.partitions)
                and (not exact or len(found.partitions) == partitions))

    wait_until(visible, timeout=15, interval=0.1, message=f"topic {topic} with {partitions} partitions")
