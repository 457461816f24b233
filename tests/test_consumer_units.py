"""Pure-logic tests of the consumer building blocks (no broker): tracker, pool, lanes, throttle, retry naming."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from ykafka import headers as H
from ykafka.consumer.dedupe import Dedupe, message_id
from ykafka.consumer.engine import Engine
from ykafka.consumer.offsets import PartitionTracker
from ykafka.consumer.ordering import Dispatcher
from ykafka.consumer.pool import WorkerPool
from ykafka.consumer.retry import RetryPolicy, RetryRouter, dlq_topic, retry_topic
from ykafka.consumer.session import ConsumerSession
from ykafka.consumer.settings import ConsumerSettings
from ykafka.errors import ConfigError
from ykafka.throttle import TokenBucket


def msg(offset: int, key: bytes | None = None, partition: int = 0, topic: str = "t",
        headers: list[tuple[str, bytes]] | None = None) -> Message:
    return Message(topic=topic, partition=partition, offset=offset, key=key, value=str(offset).encode(),
                   headers=headers, timestamp=(1, 1000 + offset))


# --- offsets ------------------------------------------------------------------------------------------

def test_commit_position_is_the_first_offset_of_the_oldest_unfinished_task() -> None:
    tracker = PartitionTracker("t", 0)
    a = tracker.add([msg(10), msg(11)], 10, 11)
    b = tracker.add([msg(12)], 12, 12)
    c = tracker.add([msg(13), msg(14)], 13, 14)
    assert tracker.position() == 10
    b.finished = True
    c.finished = True
    assert tracker.position() == 10  # 10 and 11 still unfinished: nothing past them may be committed
    a.finished = True
    assert tracker.position() == 15
    assert tracker.inflight == 0 and tracker.idle()


def test_key_tasks_with_interleaved_offsets_commit_below_the_lowest_unfinished() -> None:
    tracker = PartitionTracker("t", 0)
    k1 = tracker.add([msg(0), msg(2), msg(5)], 0, 5)
    k2 = tracker.add([msg(1), msg(3)], 1, 3)
    k3 = tracker.add([msg(4)], 4, 4)
    assert tracker.next_offset == 6  # the max, not the last task's end
    k1.finished = True
    k3.finished = True
    assert tracker.position() == 1
    k2.finished = True
    assert tracker.position() == 6


def test_unacknowledged_retry_copy_pins_the_commit() -> None:
    tracker = PartitionTracker("t", 0)
    task = tracker.add([msg(7)], 7, 7)
    ack = task.add_ack()
    task.finished = True
    assert tracker.position() == 7
    assert tracker.pending_commit() == 7
    tracker.committed = 7
    assert tracker.pending_commit() is None
    ack.acked = True
    assert tracker.position() == 8


# --- pool ---------------------------------------------------------------------------------------------

def test_pool_resizes_live_without_losing_or_repeating_items() -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def run(item: int) -> None:
        time.sleep(0.001)
        with lock:
            seen.append(item)

    pool = WorkerPool(run, 2)
    for i in range(300):
        pool.submit(i)
        if i == 50:
            pool.resize(8)
        if i == 150:
            pool.resize(1)
        if i == 250:
            pool.resize(3)
    deadline = time.monotonic() + 20
    while len(seen) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(seen) == list(range(300))
    deadline = time.monotonic() + 5
    while pool.alive != 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.alive == 3 and pool.size == 3
    pool.close()
    assert pool.alive == 0


def test_pool_rejects_zero_workers() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        WorkerPool(lambda item: None, 0)


# --- ordering -----------------------------------------------------------------------------------------

class _Runner:
    """Runs tasks like the engine's workers do and records concurrency per key / partition."""

    def __init__(self) -> None:
        self.dispatcher: Dispatcher | None = None
        self.active: dict[Any, int] = defaultdict(int)
        self.max_active: dict[Any, int] = defaultdict(int)
        self.order: dict[Any, list[int]] = defaultdict(list)
        self.lock = threading.Lock()
        self.done = 0

    def __call__(self, task: Any) -> None:
        for m in task.msgs:
            ident = m.key() if self.dispatcher and self.dispatcher.ordering == "key" else m.partition()
            with self.lock:
                self.active[ident] += 1
                self.max_active[ident] = max(self.max_active[ident], self.active[ident])
                self.order[ident].append(m.offset())
            time.sleep(0.0005)
            with self.lock:
                self.active[ident] -= 1
                self.done += 1
        task.finished = True
        assert self.dispatcher is not None
        self.dispatcher.task_done(task)


@pytest.mark.parametrize("ordering", ["partition", "key"])
def test_lanes_serialise_per_partition_or_key(ordering: str) -> None:
    runner = _Runner()
    pool = WorkerPool(runner, 8)
    dispatcher = Dispatcher(pool, ordering)  # type: ignore[arg-type]
    runner.dispatcher = dispatcher
    trackers = {p: PartitionTracker("t", p) for p in range(2)}
    offsets = {0: 0, 1: 0}
    for _batch in range(10):
        for p in range(2):
            run = []
            for _ in range(20):
                o = offsets[p]
                run.append(msg(o, key=f"k{o % 5}-{p}".encode(), partition=p))
                offsets[p] += 1
            dispatcher.dispatch_run(trackers[p], run, dispatcher.chunk_size(40))
    deadline = time.monotonic() + 20
    while runner.done < 400 and time.monotonic() < deadline:
        time.sleep(0.01)
    pool.close()
    assert runner.done == 400
    assert all(v == 1 for v in runner.max_active.values()), dict(runner.max_active)
    for ident, seen in runner.order.items():
        assert seen == sorted(seen), ident
    for tracker in trackers.values():
        assert tracker.position() == 200
        assert not tracker.lanes or all(not lane.active for lane in tracker.lanes.values())
    if ordering == "key":
        assert trackers[0].lanes == {}  # idle key lanes are retired: memory stays bounded


def test_none_ordering_chunks_a_run_so_every_worker_gets_work() -> None:
    pool = WorkerPool(lambda task: None, 16)
    dispatcher = Dispatcher(pool, "none")
    assert dispatcher.chunk_size(320) == 10
    assert dispatcher.chunk_size(5) == 1
    assert dispatcher.chunk_size(1_000_000) == 256
    pool.close()


def test_a_fetched_batch_is_cut_into_runs_per_topic_and_partition_errors_dropped() -> None:
    """The fetch loop's batch reaches the trackers as runs of consecutive messages of one partition: a partition
    number shared by two topics in a row is two runs, an error message neither cuts a run nor is handled."""
    pool = WorkerPool(lambda task: None, 1)
    engine = Engine(ConsumerSession({}), "g", {}, ConsumerSettings(), None)
    engine.pool = pool
    engine.dispatcher = Dispatcher(pool, "partition")
    engine.msg_cost = 1e-6  # a fast handler with nothing pending runs whole runs on the fetch thread
    handled: list[tuple[str, int, int]] = []
    engine._handler = lambda m: handled.append((m.topic(), m.partition(), m.offset()))
    errors: list[Any] = []
    engine._on_error = errors.append  # type: ignore[method-assign]
    eof = Message(topic="a", partition=1, error=KafkaError(KafkaError._PARTITION_EOF))
    batch = [msg(0, topic="a"), msg(1, topic="a"), msg(7, topic="b"), msg(0, partition=1, topic="a"),
             msg(1, partition=1, topic="a"), eof, msg(2, partition=1, topic="a"), msg(2, topic="a"),
             msg(8, topic="b")]
    engine._dispatch(batch)
    pool.close()
    assert errors == [eof]
    assert {tp: [(t.first, t.last, t.count) for t in tracker.tasks] for tp, tracker in engine.trackers.items()} \
        == {("a", 0): [(0, 1, 2), (2, 2, 1)], ("b", 0): [(7, 7, 1), (8, 8, 1)], ("a", 1): [(0, 2, 3)]}
    # a finished task lets its messages go while it waits in the window (the batch is not kept alive for the GC)
    assert [t.msgs for tracker in engine.trackers.values() for t in tracker.tasks] == [[]] * 5
    assert handled == [(m.topic(), m.partition(), m.offset()) for m in batch if m.error() is None]
    assert {tp: tracker.position() for tp, tracker in engine.trackers.items()} == {("a", 0): 3, ("b", 0): 9,
                                                                                   ("a", 1): 3}


def test_a_partition_number_names_its_topic_only_while_no_other_fetchable_topic_has_it() -> None:
    """session.topic_of, which lets the fetch loop name a run without asking each message its topic, maps a partition
    number only while exactly one topic the handle was ever given has it: a topic assigned later with the same
    number takes the entry away for good (its messages may sit next to the first topic's in one batch, and a
    revoke does not give it back), until the handle closes (a new handle's queue holds nothing of the old one's)."""
    session = ConsumerSession({})
    session.may_fetch([TopicPartition("a", 0), TopicPartition("a", 1)])
    assert session.topic_of == {0: "a", 1: "a"}
    session.may_fetch([TopicPartition("b", 1), TopicPartition("b", 2)])
    assert session.topic_of == {0: "a", 2: "b"}
    before = session.topic_of
    session.may_fetch([TopicPartition("a", 0)])  # nothing new: the same map
    assert session.topic_of is before


# --- throttle -----------------------------------------------------------------------------------------

def test_token_bucket_limits_and_unlimited() -> None:
    bucket = TokenBucket.for_dispatch(0)
    assert bucket.allowance(500) == 500 and bucket.wait_time() == 0
    bucket.set_rate(100)
    taken = 0
    start = time.monotonic()
    while time.monotonic() - start < 0.5:
        n = bucket.allowance(1000)
        bucket.take(n)
        taken += n
        time.sleep(0.005)
    assert 35 <= taken <= 65, taken  # 100/s for 0.5 s, burst at most 10
    bucket.take(20)
    assert bucket.wait_time() > 0.1


# --- retry naming and policy --------------------------------------------------------------------------

def test_retry_topic_names_and_parsing() -> None:
    assert retry_topic("g1", "orders", 2) == "__ykafka-retry.2.g1.orders.retry.2"
    assert dlq_topic("my group", "orders") == "__ykafka-retry.8.my_group.orders.dlq"
    router = RetryRouter.__new__(RetryRouter)
    router.group = "g.1"
    router._prefix = "__ykafka-retry.3.g.1."
    assert router.parse_retry_topic("__ykafka-retry.3.g.1.orders.eu.retry.3") == ("orders.eu", 3)
    assert router.parse_retry_topic("__ykafka-retry.3.g.1.orders.dlq") is None
    assert router.parse_retry_topic("__ykafka-retry.5.other.orders.retry.1") is None
    assert router.parse_retry_topic("g.1.orders.retry.1") is None  # the names before issue 37
    # group "g" and group "g.1" never share a prefix (the length comes first)
    assert not retry_topic("g.1", "orders", 1).startswith(retry_topic("g", "x", 1).rsplit("x.retry.1", 1)[0])
    policy = RetryPolicy((100, 500), 4, True)
    assert [policy.delay_ms(n) for n in (1, 2, 3, 4)] == [100, 500, 500, 500]


def test_retry_view_restores_the_original_coordinates() -> None:
    raw = msg(3, key=b"k", topic="g.t.retry.1", headers=[
        (H.ORIGINAL_TOPIC, b"t"), (H.ORIGINAL_PARTITION, b"5"), (H.ORIGINAL_OFFSET, b"42"),
        (H.ORIGINAL_TIMESTAMP, b"1234"), (H.ATTEMPT, b"1"), (H.NOT_BEFORE, b"99")])
    view = RetryRouter.view(raw)
    assert (view.topic(), view.partition(), view.offset(), view.timestamp()) == ("t", 5, 42, (1, 1234))
    assert view.key() == b"k" and view.value() == b"3"
    assert RetryRouter.not_before(raw) == 99
    assert message_id(view) == "t/5/42"
    assert message_id(msg(1, headers=[(H.TRACE_ID, b"tr-1")])) == "tr-1"
    assert message_id(msg(1, headers=[(H.TRACE_ID, b"tr-1"), (H.MESSAGE_ID, b"id-1")])) == "id-1"


# --- dedupe and settings ------------------------------------------------------------------------------

def test_dedupe_skips_ids_already_handled_but_not_failed_ones() -> None:
    calls: list[int] = []

    def handler(m: Message) -> None:
        calls.append(m.offset())
        if m.offset() == 2:
            raise RuntimeError("fail")

    dedupe = Dedupe(maxsize=10, ttl_s=60)
    wrapped = dedupe(handler)
    first = msg(1, headers=[(H.MESSAGE_ID, b"abc")])
    wrapped(first)
    wrapped(msg(9, headers=[(H.MESSAGE_ID, b"abc")]))  # same id, other offset: a duplicate
    with pytest.raises(RuntimeError):
        wrapped(msg(2))
    with pytest.raises(RuntimeError):
        wrapped(msg(2))  # a failure is not remembered
    assert calls == [1, 2, 2]
    assert dedupe.skipped == 1


def test_settings_from_local_options() -> None:
    from ykafka import config

    conf = config.load({"bootstrap.servers": "x:1", "ykafka.consumer.max.inflight.per.partition": "50"}, "consumer")
    assert ConsumerSettings.from_options(conf.options).max_inflight_per_partition == 50
    with pytest.raises(ConfigError, match="max.inflight"):
        config.load({"bootstrap.servers": "x:1", "ykafka.consumer.max.inflight.per.partition": "0"}, "consumer")


def test_revoke_gives_up_only_the_unstarted_tail() -> None:
    tracker = PartitionTracker("t", 0)
    a = tracker.add([msg(0)], 0, 0)
    b = tracker.add([msg(1)], 1, 1)
    c = tracker.add([msg(2)], 2, 2)
    d = tracker.add([msg(3)], 3, 3)
    a.started = a.finished = True
    c.started = True  # running
    assert tracker.skip_unstarted_tail() == 1  # only d: b is unstarted but before a started task
    assert (b.skipped, d.skipped) == (False, True)
    assert not tracker.settled()
    b.started = b.finished = True
    c.finished = True
    assert tracker.settled()
    assert tracker.position() == 3  # the skipped task is not done: the next owner starts there


def test_revoke_never_skips_a_key_task_that_interleaves_with_work_that_runs() -> None:
    tracker = PartitionTracker("t", 0)
    k1 = tracker.add([msg(5), msg(9), msg(12)], 5, 12)
    k2 = tracker.add([msg(7), msg(8)], 7, 8)  # starts below 12: must run, or 9 and 12 would be repeated
    k3 = tracker.add([msg(15)], 15, 15)
    k1.started = True
    assert tracker.skip_unstarted_tail() == 1
    assert (k2.skipped, k3.skipped) == (False, True)


def test_a_task_is_either_claimed_by_a_worker_or_given_up_by_a_revoke_never_both() -> None:
    """The claim and the revoke's skip decide under one lock: a message is handled here or left to the next
    owner (CI once saw six handled twice across a rebalance under load)."""
    tracker = PartitionTracker("t", 0)
    first, second, third = (tracker.add([object()], off, off) for off in (0, 1, 2))
    assert third.claim()  # a worker took the newest task: nothing behind it can be given up
    assert tracker.skip_unstarted_tail() == 0 and not second.skipped
    tracker = PartitionTracker("t", 0)
    first, second, third = (tracker.add([object()], off, off) for off in (0, 1, 2))
    assert first.claim()
    assert tracker.skip_unstarted_tail() == 2 and second.skipped and third.skipped
    assert not second.claim() and not second.started  # given up: no worker runs it
    first.finished = True
    assert tracker.position() == 1  # the next owner starts at the first given-up offset

    # many workers racing one revoke: every task ends claimed xor skipped
    for _ in range(200):
        tracker = PartitionTracker("t", 0)
        tasks = [tracker.add([object()], off, off) for off in range(20)]
        claimed: list[bool] = [False] * len(tasks)

        def work(index: int, tasks: list[Any] = tasks, claimed: list[bool] = claimed) -> None:
            claimed[index] = tasks[index].claim()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(tasks))]
        for thread in threads[:10]:
            thread.start()
        tracker.skip_unstarted_tail()
        for thread in threads[10:]:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(claimed[i] != tasks[i].skipped for i in range(len(tasks)))


def test_drop_in_poll_and_consume_after_close_raise_closed_error(tmp_path: Any) -> None:
    """poll / consume read one attribute that close() clears (the drop-in hot path): closed is still refused."""
    from ykafka.consumer import Consumer
    from ykafka.errors import ClosedError

    consumer = Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "closed-check",
                         "ykafka.cache.dir": str(tmp_path)})
    poll = consumer.poll  # bound before the close, as a loop holding it would
    consumer.close()
    for call in (poll, lambda: consumer.poll(0), lambda: consumer.consume(5, 0)):
        with pytest.raises(ClosedError, match="Consumer closed"):
            call()
