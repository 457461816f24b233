"""Consumer-group offset resets (console and ``ykafka admin groups reset``).

A reset moves a group's committed offsets per topic and partition to the earliest or latest offset, the first
offset at a timestamp, a given offset, or shifted by N (clamped to what the partition holds). The plan shows each
partition's current and new offset and the lag after. Kafka accepts new offsets only for a group without
members, so:

* an empty group is reset at once (``AdminClient.alter_consumer_group_offsets``);
* a group whose members are all live ykafka consumers is reset in steps (:mod:`metaserver.kafka.offset_jobs`): its
  consumers pause and leave through hot config (``consumer.paused`` / ``consumer.leave`` at ``group:<name>``),
  the reset waits until every one reports it and the broker lists no member, resets, then restores both keys;
* any other active group is refused with the reason (its members would commit over the reset).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

TARGETS = ("earliest", "latest", "timestamp", "offset", "shift")
TIMEOUT_S = 10.0

TP = tuple[str, int]


class ResetRefused(ValueError):
    """The reset cannot be done as asked (the reason is for the operator, never the raw input)."""


@dataclass(frozen=True)
class ResetSpec:
    """What to reset: ``to`` one of :data:`TARGETS`; ``value`` the timestamp (epoch ms), offset or shift;
    ``topic`` None for every topic the group has offsets for; ``partitions`` None for all of the topic's."""

    to: str
    value: int | None = None
    topic: str | None = None
    partitions: tuple[int, ...] | None = None

    def check(self) -> None:
        if self.to not in TARGETS:
            raise ResetRefused(f"reset to one of {', '.join(TARGETS)}")
        if self.to in ("timestamp", "offset", "shift") and self.value is None:
            raise ResetRefused(f"a reset to {self.to} needs a value")
        if self.to in ("timestamp", "offset") and self.value is not None and self.value < 0:
            raise ResetRefused(f"the {self.to} must be 0 or more")
        if self.partitions is not None and self.topic is None:
            raise ResetRefused("partitions need a topic")

    def describe(self) -> str:
        where = f"{self.topic}" + (f" partitions {','.join(map(str, self.partitions))}" if self.partitions else "")
        what = {"earliest": "earliest", "latest": "latest", "timestamp": f"timestamp {self.value}",
                "offset": f"offset {self.value}", "shift": f"shift by {self.value:+d}" if self.value is not None
                else "shift"}[self.to]
        return f"{what} on {where or 'every topic of the group'}"

    def as_dict(self) -> dict[str, Any]:
        return {"to": self.to, "value": self.value, "topic": self.topic,
                "partitions": list(self.partitions) if self.partitions is not None else None}


@dataclass
class GroupView:
    state: str
    #: broker-side members: (client.id, host without the leading slash)
    members: list[tuple[str, str]] = field(default_factory=list)

    @property
    def active(self) -> bool:
        """Members, or a state that says so (Tansu lists a STABLE group's members as none)."""
        return bool(self.members) or self.state not in ("EMPTY", "DEAD", "UNKNOWN")

    @property
    def member_count(self) -> str:
        return str(len(self.members)) if self.members or not self.active else "some (not listed)"


def _result(future: Any) -> Any:
    try:
        return future.result()
    except KafkaException as exc:
        raise ResetRefused(f"the broker refused: {exc.args[0].str() if exc.args else exc}") from None


class GroupOffsets:
    """The few AdminClient calls a reset makes on one cluster."""

    def __init__(self, props: Mapping[str, Any], admin: AdminClient | None = None) -> None:
        self.props = dict(props)
        self.admin = admin if admin is not None else AdminClient(dict(props))

    def describe(self, group: str) -> GroupView:
        desc = _result(self.admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group])
        state = str(getattr(desc.state, "name", desc.state)).upper()
        return GroupView(state, [(str(m.client_id), str(m.host or "").lstrip("/")) for m in desc.members])

    def committed(self, group: str) -> dict[TP, int]:
        request = [ConsumerGroupTopicPartitions(group)]
        answer = _result(self.admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT_S)[group])
        return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions if tp.offset >= 0}

    def partitions(self, topic: str) -> list[int]:
        meta = self.admin.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise ResetRefused("no such topic on this cluster")
        return sorted(meta.partitions)

    def _reader(self) -> Consumer:
        # watermarks and times through a consumer that never joins or commits (ListOffsets through the
        # AdminClient answered wrong end offsets on Tansu)
        return Consumer({**self.props, "group.id": "ykafka-metaserver-offsets", "enable.auto.commit": False,
                         "log_level": 3})

    def watermarks(self, tps: list[TP]) -> tuple[dict[TP, int], dict[TP, int]]:
        low: dict[TP, int] = {}
        high: dict[TP, int] = {}
        reader = self._reader()
        try:
            for t, p in tps:
                low[(t, p)], high[(t, p)] = reader.get_watermark_offsets(TopicPartition(t, p), timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise ResetRefused(f"the broker refused: {exc.args[0].str() if exc.args else exc}") from None
        finally:
            reader.close()
        return low, high

    def at_time(self, tps: list[TP], ts_ms: int) -> dict[TP, int]:
        """The first offset at or after ``ts_ms`` per partition (-1: no message that late)."""
        reader = self._reader()
        try:
            found = reader.offsets_for_times([TopicPartition(t, p, ts_ms) for t, p in tps], timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise ResetRefused(f"the broker refused: {exc.args[0].str() if exc.args else exc}") from None
        finally:
            reader.close()
        return {(tp.topic, tp.partition): int(tp.offset) for tp in found}

    def alter(self, group: str, offsets: Mapping[TP, int]) -> None:
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in
                                                        sorted(offsets.items())])]
        _result(self.admin.alter_consumer_group_offsets(request, request_timeout=TIMEOUT_S)[group])


def plan(broker: GroupOffsets, group: str, spec: ResetSpec) -> list[dict[str, Any]]:
    """Per partition: current committed offset (None: nothing committed), new offset, the partition's earliest
    and latest offsets and the lag after the reset; sorted by topic and partition."""
    spec.check()
    committed = broker.committed(group)
    if spec.topic is not None:
        parts = broker.partitions(spec.topic)
        if spec.partitions is not None:
            missing = sorted(set(spec.partitions) - set(parts))
            if missing:
                raise ResetRefused(f"the topic has no partition {', '.join(map(str, missing))} "
                                   f"(it has {len(parts)})")
            parts = sorted(set(spec.partitions))
        tps = [(spec.topic, p) for p in parts]
    else:
        tps = sorted(committed)
        if not tps:
            raise ResetRefused("the group has no committed offsets: name a topic")
    low, high = broker.watermarks(tps)
    at = broker.at_time(tps, int(spec.value or 0)) if spec.to == "timestamp" else {}
    rows = []
    for tp in tps:
        lo, hi, cur = low[tp], high[tp], committed.get(tp)
        if spec.to == "earliest":
            new = lo
        elif spec.to == "latest":
            new = hi
        elif spec.to == "timestamp":
            new = at[tp] if at.get(tp, -1) >= 0 else hi  # no message at or after it: the end
        elif spec.to == "offset":
            new = int(spec.value or 0)
        else:
            new = (cur if cur is not None else lo) + int(spec.value or 0)
        new = min(max(new, lo), hi)
        rows.append({"topic": tp[0], "partition": tp[1], "current": cur, "new": new, "earliest": lo, "latest": hi,
                     "lag": hi - new, "lag_before": (hi - cur) if cur is not None else None})
    return rows


def foreign_members(view: GroupView, ykafka_consumers: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Broker members not accounted for by live ykafka consumers of the group: a member counts as ykafka when
    its host is one of theirs and there are no more members on that host than ykafka consumers there. An
    active group whose broker lists no member is foreign unless ykafka consumers report it."""
    if view.active and not view.members:
        return [] if ykafka_consumers else [("?", "")]
    by_host: dict[str, int] = {}
    for c in ykafka_consumers:
        by_host[str(c.get("ip") or "")] = by_host.get(str(c.get("ip") or ""), 0) + 1
    out = []
    for client_id, host in view.members:
        if by_host.get(host, 0) > 0:
            by_host[host] -= 1
        else:
            out.append((client_id, host))
    return out


def apply_direct(broker: GroupOffsets, group: str, rows: list[dict[str, Any]]) -> None:
    """Reset an empty group: refused if it has members now (they would commit over it)."""
    view = broker.describe(group)
    if view.active:
        raise ResetRefused(f"the group is {view.state} with {view.member_count} member(s) now")
    broker.alter(group, {(r["topic"], r["partition"]): r["new"] for r in rows})


def audit_maps(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(before, after) per ``topic[partition]``, as the audit log shows a change."""
    return ({f"{r['topic']}[{r['partition']}]": r["current"] for r in rows},
            {f"{r['topic']}[{r['partition']}]": r["new"] for r in rows})
