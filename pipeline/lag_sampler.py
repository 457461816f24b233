"""Lag sampler: committed offsets and end offsets of every consumer group, read from the broker.

Burrow-style evaluation needs samples even when a consumer is dead (its own statistics stop with it), so
the pipeline samples the cluster itself with the AdminClient and writes the samples as ``lag`` metric
events (``source=sampler``; ``count`` = 1 when the group had live members, 0 when it had none) to
``__ykafka_metrics``, where they join the clients' own lag statistics.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from ykafka import events
from ykafka.events import MetricName

log = structlog.get_logger(__name__)

LIVE_STATES = {"STABLE", "PREPARING_REBALANCE", "COMPLETING_REBALANCE", "ASSIGNING", "RECONCILING"}
SKIP_GROUPS = ("ykafka-pipeline*",)


def _state_name(state: Any) -> str:
    return str(getattr(state, "name", state) or "UNKNOWN").upper()


class GroupInfo:
    """What the broker says about one group."""

    def __init__(self, group: str, state: str, members: int, offsets: dict[tuple[str, int], int]) -> None:
        self.group = group
        self.state = state
        self.members = members
        self.offsets = offsets  # committed offsets

    @property
    def alive(self) -> bool:
        return self.members > 0 or self.state in LIVE_STATES

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "state": self.state, "members": self.members,
                "offsets": {f"{t}:{p}": o for (t, p), o in sorted(self.offsets.items())}}


class LagSampler:
    """Reads groups, committed offsets and end offsets of one cluster."""

    def __init__(self, bootstrap: str, cluster: str = "", timeout_s: float = 10.0,
                 skip: Iterable[str] = SKIP_GROUPS, conf: Mapping[str, Any] | None = None) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        base: dict[str, Any] = {"bootstrap.servers": bootstrap, "log_level": 3}
        base.update(conf or {})
        self.admin = AdminClient(dict(base))
        self.consumer = Consumer({**base, "group.id": "ykafka-pipeline-sampler", "enable.auto.commit": False})
        self.cluster = cluster
        self.timeout_s = timeout_s
        self.skip = list(skip)
        self.described = 0  # groups described (with their offsets) so far: what a paged read keeps bounded

    def group_names(self) -> list[str]:
        """Every group's name, sorted (one ListGroups request per broker; nothing described): what a page of
        groups is cut from, so describing and reading offsets is paid only for the page."""
        listed = self.admin.list_consumer_groups(request_timeout=self.timeout_s).result(self.timeout_s)
        return sorted(g.group_id for g in listed.valid
                      if not any(fnmatch.fnmatch(g.group_id, pattern) for pattern in self.skip))

    def groups(self, only: Iterable[str] | None = None) -> list[GroupInfo]:
        """Every group (or ``only`` these) with state, member count and committed offsets."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        names = self.group_names() if only is None else sorted(only)
        self.described += len(names)
        if not names:
            return []
        # every group's offsets are asked for at once with the descriptions (one request each, answered in
        # parallel), then waited for: a topic read by ten groups costs one round trip, not ten
        asked: dict[str, Any] = {}
        for name in names:
            try:
                asked[name] = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(name)],
                                                                     request_timeout=self.timeout_s)
            except Exception as exc:
                log.debug("ykafka.pipeline.offsets_failed", group=name, error=str(exc))
        described: dict[str, tuple[str, int]] = {}
        for name, future in self.admin.describe_consumer_groups(names, request_timeout=self.timeout_s).items():
            try:
                desc = future.result(self.timeout_s)
                described[name] = (_state_name(desc.state), len(desc.members or []))
            except Exception as exc:
                log.debug("ykafka.pipeline.describe_failed", group=name, error=str(exc))
                described[name] = ("UNKNOWN", 0)
        out = []
        for name in names:
            offsets: dict[tuple[str, int], int] = {}
            try:
                for future in asked.get(name, {}).values():
                    for tp in future.result(self.timeout_s).topic_partitions or []:
                        if tp.error is None:
                            offsets[(tp.topic, tp.partition)] = tp.offset
            except Exception as exc:
                log.debug("ykafka.pipeline.offsets_failed", group=name, error=str(exc))
            state, members = described.get(name, ("UNKNOWN", 0))
            out.append(GroupInfo(name, state, members, offsets))
        return out

    def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition

        out = {}
        for topic, partition in set(partitions):
            try:
                _low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                                 timeout=self.timeout_s)
                out[(topic, partition)] = int(high)
            except Exception as exc:
                log.debug("ykafka.pipeline.watermark_failed", topic=topic, partition=partition, error=str(exc))
        return out

    def topic_partitions(self, topic: str) -> list[int]:
        meta = self.consumer.list_topics(topic, timeout=self.timeout_s).topics.get(topic)
        return [] if meta is None or meta.error is not None else sorted(meta.partitions)

    def sample(self, groups: Iterable[str] | None = None,
               expected: Mapping[str, Iterable[str]] | None = None) -> list[dict[str, Any]]:
        """Lag metric events for every committed partition of every group.

        ``expected`` maps group -> topics it should consume (from client events); partitions of those
        topics without a commit yield samples with ``committed = -1`` ("no commit at all").
        """
        return self.lag_of(self.groups(groups), expected)

    def partitions_of(self, topics: Iterable[str]) -> dict[str, list[int]]:
        """Partitions of each topic (``[]`` for a topic the cluster does not have), in one metadata request
        when there are several: a group whose clients name a hundred topics costs one round trip, not 100."""
        names = sorted(set(topics))
        if len(names) <= 1:
            return {name: self.topic_partitions(name) for name in names}
        meta = self.consumer.list_topics(timeout=self.timeout_s).topics
        return {name: [] if meta.get(name) is None or meta[name].error is not None else sorted(meta[name].partitions)
                for name in names}

    def lag_of(self, infos: list[GroupInfo], expected: Mapping[str, Iterable[str]] | None = None
               ) -> list[dict[str, Any]]:
        """:meth:`sample` for groups already read with :meth:`groups`."""
        parts = self.partitions_of(t for info in infos for t in (expected or {}).get(info.group, ()))
        wanted: dict[str, set[tuple[str, int]]] = {}
        for info in infos:
            tps = set(info.offsets)
            for topic in (expected or {}).get(info.group, ()):
                tps.update((topic, p) for p in parts.get(topic, []))
            wanted[info.group] = tps
        ends = self.end_offsets(tp for tps in wanted.values() for tp in tps)
        ts = events.now_ms()
        out = []
        for info in infos:
            for topic, partition in sorted(wanted[info.group]):
                end = ends.get((topic, partition))
                if end is None:
                    continue
                committed = info.offsets.get((topic, partition), -1)
                lag = max(0, end - committed) if committed >= 0 else end
                out.append({"ts": ts, "name": str(MetricName.LAG), "client_id": "ykafka-pipeline",
                            "role": "pipeline", "cluster": self.cluster, "topic": topic, "group": info.group,
                            "partition": partition, "value": float(lag), "committed": committed,
                            "end_offset": end, "count": 1 if info.alive else 0, "source": "sampler"})
        return out

    def publish(self, producer: Any, samples: list[dict[str, Any]]) -> None:
        """Write samples to ``__ykafka_metrics`` as one batch message."""
        if samples:
            producer.produce(events.METRICS_TOPIC, events.encode("metric", samples))
            producer.poll(0)

    def close(self) -> None:
        self.consumer.close()


def wait_until(predicate: Any, timeout_s: float, interval_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
