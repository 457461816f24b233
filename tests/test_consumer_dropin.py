"""Drop-in use (the user's own poll loop) and ``run_async``, on a real broker."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Message, TopicPartition

from tests.consumer_fixtures import consumer_config, create_topic, produce, unique, wait_until
from ykafka.consumer import Consumer, Dedupe


def test_own_poll_loop_with_commits_pause_and_live_rebuild(bootstrap: str, tmp_path: Path) -> None:
    topic, group = unique("dropin"), unique("g")
    create_topic(bootstrap, topic, 2)
    where = produce(bootstrap, topic, 60, keys=6)
    assigned: list[int] = []
    consumer = Consumer(consumer_config(bootstrap, group, tmp_path))
    try:
        consumer.subscribe([topic], on_assign=lambda c, ps: assigned.extend(tp.partition for tp in ps))
        seen: list[int] = []
        deadline = time.monotonic() + 60
        while len(seen) < 30 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append(int(msg.value()))
                consumer.commit(message=msg, asynchronous=False)
        assert sorted(assigned) == [0, 1]
        paused = [TopicPartition(topic, p) for p in (0, 1)]
        consumer.pause(paused)
        drained = [m for m in consumer.consume(100, 1.0) if m.error() is None]
        assert drained == []  # paused: nothing is fetched
        consumer.resume(paused)
        consumer.apply({"consumer.fetch.wait.max.ms": 20})  # applied on the next poll: a rebuilt handle
        while len(seen) < 60 and time.monotonic() < deadline:
            for msg in consumer.consume(10, 0.2):
                if msg.error() is None:
                    seen.append(int(msg.value()))
                    consumer.commit(message=msg, asynchronous=False)
        assert consumer.generation == 2 and consumer.client_config["fetch.wait.max.ms"] == 20
        assert sorted(seen) == list(range(60))
        committed = consumer.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
        ends = {p: 0 for p in (0, 1)}
        for partition, offset in where.values():
            ends[partition] = max(ends[partition], offset + 1)
        assert {tp.partition: tp.offset for tp in committed} == ends
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert low == 0 and high >= 1
        assert topic in consumer.list_topics(topic, timeout=10).topics
    finally:
        consumer.close()


def test_run_async_handler_and_dedupe(bootstrap: str, tmp_path: Path) -> None:
    topic, group = unique("async"), unique("g")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 40, keys=4)
    produce(bootstrap, topic, 10, keys=4, start=0)  # ten duplicates: same ykafka-id as values 0..9
    handled: list[int] = []
    concurrent = {"now": 0, "max": 0}

    dedupe = Dedupe(maxsize=1000, ttl_s=60)

    @dedupe
    def sync_view(msg: Message) -> None:
        handled.append(int(msg.value()))

    async def handler(msg: Message) -> None:
        concurrent["now"] += 1
        concurrent["max"] = max(concurrent["max"], concurrent["now"])
        await asyncio.sleep(0.01)
        concurrent["now"] -= 1
        sync_view(msg)

    consumer = Consumer(consumer_config(bootstrap, group, tmp_path, **{"consumer.workers": 4,
                                                                        "consumer.ordering": "none"}))
    thread = threading.Thread(target=consumer.run_async, args=(handler, [topic]), daemon=True)
    thread.start()
    try:
        wait_until(lambda: dedupe.skipped >= 10 and len(handled) >= 40, 60, message="40 handled, 10 skipped")
    finally:
        consumer.stop()
        thread.join(30)
        consumer.close()
    assert sorted(handled) == list(range(40))  # the ten duplicates were skipped by id
    assert concurrent["max"] > 1  # coroutines overlapped on the event loop
    assert dedupe.skipped == 10


def test_revoke_fired_by_close_may_call_the_consumer(bootstrap: str, tmp_path: Path) -> None:
    """librdkafka fires the last revoke inside ``close()``, on the closing thread; as with confluent-kafka, an
    ``on_revoke`` there may still call ``incremental_unassign()`` (issue 40: it raised "Consumer closed")."""
    topic, group = unique("closerevoke"), unique("g")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 4, keys=2)
    conf = {**consumer_config(bootstrap, group, tmp_path), "partition.assignment.strategy": "cooperative-sticky"}
    consumer = Consumer(conf)
    revoked: list[list[int]] = []
    errors: list[BaseException] = []

    def on_revoke(c: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            c.incremental_unassign(partitions)
            revoked.append(sorted(tp.partition for tp in partitions))
        except BaseException as exc:  # handed to the assertion below
            errors.append(exc)

    consumer.subscribe([topic], on_revoke=on_revoke)
    assert wait_until(lambda: consumer.poll(0.2) is not None or bool(consumer.assignment()), 30)
    consumer.close()
    assert errors == []
    assert revoked == [[0, 1]]
    with pytest.raises(RuntimeError, match="^Consumer closed$"):  # other threads, and later calls, are refused
        consumer.poll(0)


@pytest.mark.parametrize("form", ["poll", "consume"])
def test_poll_applies_live_changes_while_it_calls_librdkafka_directly(bootstrap: str, tmp_path: Path,
                                                                      form: str) -> None:
    """With nothing to check the drop-in poll is librdkafka's own (the session's gate armed: issue 39); a rate limit
    and a leave / rejoin applied live still hold from the next call on, and the gate arms again after them.
    ``consume`` is armed by the same gate (and arms it: a consume-only loop), and held to the same."""
    topic, group = unique("gate"), unique("g")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 60)
    consumer = Consumer(consumer_config(bootstrap, group, tmp_path))
    gate = consumer._session.gate
    seen: list[int] = []

    def take(n: int) -> None:
        deadline = time.monotonic() + 30
        want = len(seen) + n
        while len(seen) < want and time.monotonic() < deadline:
            msgs = [consumer.poll(0.2)] if form == "poll" else consumer.consume(min(5, want - len(seen)), 0.2)
            seen.extend(int(m.value()) for m in msgs if m is not None and m.error() is None)
        assert len(seen) == want

    try:
        consumer.subscribe([topic])
        take(10)
        assert gate.fast is not None  # armed
        consumer.apply({"consumer.rate.limit.msgs": 10})
        started = time.monotonic()
        take(20)  # a second's burst of 10, then 10 a second
        assert time.monotonic() - started >= 0.8
        assert gate.fast is None  # a rate limit: every call checked
        consumer.apply({"consumer.rate.limit.msgs": 0, "consumer.leave": True})
        if form == "poll":
            assert consumer.poll(0.1) is None and consumer.poll(0.1) is None
        else:
            assert consumer.consume(5, 0.1) == [] and consumer.consume(5, 0.1) == []
        assert consumer._session.left and consumer._session.consumer is None
        consumer.apply({"consumer.leave": False})
        take(30)
        assert sorted(seen) == list(range(60))  # committed on leave: nothing twice, nothing lost
        assert gate.fast is not None  # armed again
    finally:
        consumer.close()
