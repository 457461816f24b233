"""Consumer.run names each fetched run's topic right with several topics, across rebalances and subscription changes.

The fetch loop cuts a batch into runs of one partition number and names a run's topic by the one topic the handle
may deliver with that number (``ConsumerSession.topic_of``, kept across revokes until the handle closes), asking
the messages themselves only when two topics share the number (issue 39: asking every message cost ~300
instructions a message, docs/benchmarks.md). A run misnamed lands in another topic's tracker: that topic's commit
jumps to the other's offsets (messages skipped) and the other is never committed (handled again). Each test
prefills topics whose partition 0 comes back in one batch next to another topic's partition 0, handles everything
once through per-topic handlers, and checks every committed offset and every value end to end: with the per-run
topic check taken out (every run named by its first message's topic) each of them fails.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import Producer as RawProducer
from confluent_kafka import TopicPartition

from tests.consumer_fixtures import (
    Recorder,
    committed,
    consumer_config,
    create_topic,
    produce,
    unique,
    wait_until,
)
from ykafka.consumer import Consumer
from ykafka.transport import Message

pytestmark = pytest.mark.broker("kafka")  # consumer-group rebalances: Apache Kafka's group coordinator


class PerTopic:
    """One Recorder a topic, the handler routing by ``msg.topic()``; a message of any other topic fails it."""

    def __init__(self, topics: list[str]) -> None:
        self.by_topic = {topic: Recorder() for topic in topics}

    def __call__(self, msg: Message) -> None:
        self.by_topic[str(msg.topic())](msg)

    def count(self) -> int:
        return sum(r.count() for r in self.by_topic.values())


def _side_by_side(bootstrap: str, writes: list[tuple[str, int, int]]) -> list[dict[int, tuple[int, int]]]:
    """Produce to partition 0 of several topics at once, interleaved, in one flush: ``(topic, count, first value)``
    each. One fetch then returns them together, the topics' partition 0 next to each other in one batch. Returns
    value -> (partition, offset) per write, as ``produce``."""
    producer = RawProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    found: list[dict[int, tuple[int, int]]] = [{} for _ in writes]

    def delivered(index: int) -> Callable[[Any, Message], None]:
        def record(err: Any, msg: Message) -> None:
            assert err is None, err
            found[index][int(msg.value() or b"")] = (int(msg.partition() or 0), int(msg.offset() or 0))
        return record

    for i in range(max(count for _, count, _ in writes)):
        for index, (topic, count, first) in enumerate(writes):
            if i < count:
                producer.produce(topic, str(first + i).encode(), partition=0, on_delivery=delivered(index))
    assert producer.flush(30) == 0
    assert [len(f) for f in found] == [count for _, count, _ in writes]
    return found


def _ends(sent: dict[int, tuple[int, int]]) -> dict[int, int]:
    """The end offset of each partition that ``produce`` wrote to."""
    ends: dict[int, int] = {}
    for partition, offset in sent.values():
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return ends


def _start_high(bootstrap: str, group: str, topic: str, count: int = 3000) -> int:
    """Put ``count`` filler messages on ``topic``'s partition 0 and commit the group past them (before it has a
    member), so the consumer starts that partition at ``count``: its offsets then lie far above the other topics'
    partition 0, and a run of theirs counted under it (or its run under theirs) moves a committed offset visibly.
    Returns ``count``."""
    producer = RawProducer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for _ in range(count):
        producer.produce(topic, b"filler", partition=0)
    assert producer.flush(30) == 0
    _commit(bootstrap, group, [TopicPartition(topic, 0, count)])
    return count


def _commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    raw = RawConsumer({"bootstrap.servers": bootstrap, "group.id": group})  # an empty group takes a plain commit
    try:
        raw.commit(offsets=offsets, asynchronous=False)
    finally:
        raw.close()


#: the broker answers a fetch after up to 300 ms with what came meanwhile, so one fetch response (one batch) holds
#: every partition written in that time: partition 0 of two topics side by side, in the order librdkafka rotates
GATHER = {"fetch.wait.max.ms": 100, "fetch.min.bytes": 1_000_000}


def _config(bootstrap: str, group: str, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return consumer_config(bootstrap, group, tmp_path, **{"ykafka.consumer.retry.topics": False, **GATHER, **extra})


def _values(handlers: list[PerTopic], topic: str) -> list[int]:
    return sorted(v for h in handlers for v in h.by_topic[topic].values)


def test_several_topics_sharing_partition_numbers_each_reach_their_handler_and_commit(
        bootstrap: str, running: Callable[..., Any], tmp_path: Path) -> None:
    """Three topics, partition 0 in each (and 1 in one of them): one batch holds all of them, partition 0's runs of
    the three next to each other. Each topic's handler gets exactly its values once; each partition commits its own
    end offset (a run named by its neighbour's topic would commit 300 for the 40-message topic and nothing for it)."""
    small, large, two = unique("t-small"), unique("t-large"), unique("t-two")
    create_topic(bootstrap, small, 1)
    create_topic(bootstrap, large, 1)
    create_topic(bootstrap, two, 2)
    sent = {small: produce(bootstrap, small, 40), large: produce(bootstrap, large, 300, start=10_000),
            two: produce(bootstrap, two, 120, keys=7, start=20_000)}
    group = unique("g-topics")
    handler = PerTopic([small, large, two])
    consumer = Consumer(_config(bootstrap, group, tmp_path))
    run = running(consumer, handler, [small, large, two])
    wait_until(lambda: handler.count() >= 460, 60, message="all 460 handled")
    # the map the fetch loop trusted: partition 1 only one topic has; 0 is shared, so its runs were checked
    assert consumer._session.topic_of == {1: two}
    run.stop()
    for topic, where in sent.items():
        assert sorted(handler.by_topic[topic].values) == sorted(where), topic  # its own values, each once
    assert {topic: committed(bootstrap, group, topic, len(_ends(where))) for topic, where in sent.items()} \
        == {topic: _ends(where) for topic, where in sent.items()}


def test_a_subscription_change_mid_run_keeps_every_run_on_its_topic(bootstrap: str, running: Callable[..., Any],
                                                                     tmp_path: Path) -> None:
    """Subscribed to one topic (every partition number its own, so the loop names every run without asking), a
    second topic joins mid-run and its partition 0 fills side by side with the first's; then the first is dropped
    (the rebalance commits and re-reads what stays from its committed offsets) while it still gets messages. Each
    value reaches its topic's handler exactly once, the dropped topic's later messages never, and every partition
    commits its end offset (a run named by its neighbour's topic leaves the new topic uncommitted: handled again
    after the drop, or commits the old topic's offsets 3,000+ for it)."""
    old, new = unique("sub-old"), unique("sub-new")
    create_topic(bootstrap, old, 2)
    create_topic(bootstrap, new, 1)
    group = unique("g-sub")
    _start_high(bootstrap, group, old)
    _commit(bootstrap, group, [TopicPartition(new, 0, 0)])  # a known start: new[0] fetches with old[0] at once
    handler = PerTopic([old, new])
    consumer = Consumer(_config(bootstrap, group, tmp_path))
    first = produce(bootstrap, old, 200, keys=11)
    run = running(consumer, handler, [old])
    wait_until(lambda: handler.by_topic[old].count() >= 200, 60, message="the first topic's 200 handled")
    assert consumer._session.topic_of == {0: old, 1: old}  # one topic: the loop names every run without asking
    consumer.subscribe([old, new])
    wait_until(lambda: len(consumer.assignment()) == 3, 30, message="both topics assigned")
    assert consumer._session.topic_of == {1: old}  # partition 0 is shared now: its runs are checked
    added, more_old = {}, {}
    for burst in range(3):  # old[0] (offsets 3,000+) beside new[0] (0+) in each fetch
        got_new, got_old = _side_by_side(bootstrap, [(new, 100, 10_000 + 100 * burst), (old, 50, 1_000 + 50 * burst)])
        added.update(got_new)
        more_old.update(got_old)
    wait_until(lambda: handler.count() >= 650, 60, message="both topics' 650 handled")
    consumer.subscribe([new])
    wait_until(lambda: len(consumer.assignment()) == 1, 30, message="the old topic revoked")
    dropped = produce(bootstrap, old, 50, partition=0, start=2_000)  # no longer subscribed: never handled here
    later = produce(bootstrap, new, 100, start=11_000)
    wait_until(lambda: handler.by_topic[new].count() >= 400, 60, message="the new topic's 400 handled")
    run.stop()
    assert committed(bootstrap, group, old, 2) == _ends({**first, **more_old})  # where it stood when dropped
    assert committed(bootstrap, group, new, 1) == _ends({**added, **later})
    assert sorted(handler.by_topic[old].values) == sorted([*first, *more_old])
    assert sorted(handler.by_topic[new].values) == sorted([*added, *later])
    assert len(dropped) == 50  # written after the drop, never handled (the old handler's values above)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_rebalance_mid_run_over_topics_sharing_partition_numbers_loses_and_repeats_nothing(
        bootstrap: str, running: Callable[..., Any], tmp_path: Path, strategy: str) -> None:
    """Two topics (2 and 1 partitions) under one consumer, partition 0 of both filled side by side; a second
    consumer joins mid-run, partitions move (each consumer re-reads what it gets from the committed offsets) and
    both topics keep receiving: every value is handled exactly once over the two consumers, and every partition
    commits its end offset."""
    a, b = unique("reb-a"), unique("reb-b")
    create_topic(bootstrap, a, 2)
    create_topic(bootstrap, b, 1)
    group = unique("g-reb")
    _start_high(bootstrap, group, a)
    _commit(bootstrap, group, [TopicPartition(a, 1, 0), TopicPartition(b, 0, 0)])  # every partition starts at once
    sent_a, sent_b = produce(bootstrap, a, 400, keys=13), produce(bootstrap, b, 100, start=10_000)
    conf = _config(bootstrap, group, tmp_path, **{"consumer.assignment.strategy": strategy, "consumer.workers": 2})
    h1, h2 = PerTopic([a, b]), PerTopic([a, b])
    c1 = Consumer(conf)
    r1 = running(c1, h1, [a, b])

    def side_by_side(first: int) -> None:
        got_a, got_b = _side_by_side(bootstrap, [(a, 100, first), (b, 50, 10_000 + first)])
        sent_a.update(got_a)
        sent_b.update(got_b)

    for burst in range(3):  # a[0] (offsets 3,000+) and b[0] (0+) side by side in each fetch
        side_by_side(1_000 + 100 * burst)
    wait_until(lambda: h1.count() >= 950, 60, message="the first consumer handled 950")
    c2 = Consumer(conf)
    r2 = running(c2, h2, [a, b])
    wait_until(lambda: len(c1.assignment()) + len(c2.assignment()) == 3 and len(c2.assignment()) > 0, 60,
               message="partitions moved to the second consumer")
    for burst in range(3):
        side_by_side(2_000 + 100 * burst)
    sent_a.update(produce(bootstrap, a, 50, partition=1, start=3_000))  # work for whoever holds a[1]
    wait_until(lambda: h1.count() + h2.count() >= 1450, 60, message="all 1,450 handled")
    r2.stop()
    r1.stop()
    handlers = [h1, h2]
    assert committed(bootstrap, group, a, 2) == _ends(sent_a)
    assert committed(bootstrap, group, b, 1) == _ends(sent_b)
    assert _values(handlers, a) == sorted(sent_a)  # nothing lost, nothing handled twice
    assert _values(handlers, b) == sorted(sent_b)
    assert h2.count() > 0  # the newcomer got partitions and work
