"""Topic administration through confluent-kafka's AdminClient (``ykafka.transport``): what the console's
topic requests use. Each call takes the cluster's connection
properties (``bootstrap.servers`` and SASL settings) and answers with plain values or a clear error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ykafka.transport import KafkaException, NewTopic, RawAdminClient


class TopicAdminError(Exception):
    """The cluster refused or did not answer; the message says what and why."""


def _admin(props: Mapping[str, Any]) -> Any:
    return RawAdminClient(dict(props))


def partition_count(props: Mapping[str, Any], topic: str, timeout: float = 10.0) -> int | None:
    """How many partitions ``topic`` has on the cluster, or None when it does not exist."""
    admin = _admin(props)
    try:
        # the whole listing: a metadata request naming the topic lets a broker auto-create it
        meta = admin.list_topics(timeout=timeout).topics.get(topic)
    except KafkaException as exc:
        raise TopicAdminError(f"cannot list topic {topic}: {exc}") from None
    if meta is None or meta.error is not None or not meta.partitions:
        return None
    return len(meta.partitions)


def describe_topic(props: Mapping[str, Any], topic: str, timeout: float = 10.0,
                   admin: Any = None) -> list[dict[str, Any]] | None:
    """Each partition of ``topic`` (``partition``, ``leader``, ``replicas``, ``isr``) from one metadata request,
    or None when the cluster does not have it; ``admin``: an AdminClient already open to the cluster."""
    try:
        # the whole listing: a metadata request naming the topic lets a broker auto-create it
        meta = (admin if admin is not None else _admin(props)).list_topics(timeout=timeout).topics.get(topic)
    except KafkaException as exc:
        raise TopicAdminError(f"cannot list topic {topic}: {exc}") from None
    if meta is None or meta.error is not None or not meta.partitions:
        return None
    return [{"partition": p.id, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs)}
            for p in sorted(meta.partitions.values(), key=lambda p: p.id)]


def create_topic(props: Mapping[str, Any], topic: str, partitions: int, config: Mapping[str, str] | None = None,
                 timeout: float = 15.0) -> bool:
    """Create ``topic``; False when it already exists with at least ``partitions`` partitions (nothing done),
    TopicAdminError when it exists with fewer or the cluster refuses."""
    admin = _admin(props)  # held until the future resolves (a collected client cancels its requests)
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=-1, config=dict(config or {}))],
        request_timeout=timeout)[topic]
    try:
        future.result()
        return True
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise TopicAdminError(f"cannot create topic {topic}: {exc.args[0] if exc.args else exc}") from None
    have = partition_count(props, topic, timeout)
    if have is not None and have < partitions:
        raise TopicAdminError(f"topic {topic} exists with {have} partitions, fewer than {partitions}")
    return False
