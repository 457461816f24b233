"""Live changes on a running framework consumer: each one keeps every message exactly once end to end."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.consumer_fixtures import Recorder, consumer_config, create_topic, produce, unique, wait_until
from ykafka.consumer import Consumer

pytestmark = pytest.mark.broker("kafka")  # live consumer groups: Apache Kafka's group coordinator


def _start(bootstrap: str, running, tmp_path: Path, count: int, delay: float = 0.002, partitions: int = 4,
           **conf):
    topic, group = unique("live"), unique("g")
    create_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, count, keys=40)
    recorder = Recorder(delay=delay)
    consumer = Consumer(consumer_config(bootstrap, group, tmp_path, **conf))
    job = running(consumer, recorder, [topic])
    return consumer, recorder, job


def _stable(recorder: Recorder, quiet: float = 0.5, timeout: float = 20) -> int:
    """Wait until the handled count stops moving for ``quiet`` seconds; return it."""
    deadline = time.monotonic() + timeout
    last, since = recorder.count(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = recorder.count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
    raise AssertionError("handled count never settled")


def test_workers_grow_and_shrink_live(bootstrap: str, running, tmp_path: Path) -> None:
    consumer, recorder, job = _start(bootstrap, running, tmp_path, 1500, **{
        "consumer.workers": 2, "consumer.ordering": "none", "ykafka.consumer.max.inflight.per.partition": 50})
    wait_until(lambda: recorder.count() >= 200, 60, message="first 200")
    assert consumer.engine.pool is not None and consumer.engine.pool.alive == 2
    assert consumer.apply({"consumer.workers": 8}) == {}
    wait_until(lambda: consumer.engine.pool.alive == 8, 10, message="8 workers")
    wait_until(lambda: recorder.count() >= 700, 60, message="700 handled")
    consumer.apply({"consumer.workers": 1})
    wait_until(lambda: consumer.engine.pool.alive == 1, 10, message="1 worker")
    wait_until(lambda: recorder.count() >= 1500, 90, message="all handled")
    job.stop()
    assert sorted(recorder.values) == list(range(1500))
    assert len(recorder.threads) >= 8


def test_invalid_value_is_rejected_and_previous_stays(bootstrap: str, running, tmp_path: Path) -> None:
    consumer, recorder, job = _start(bootstrap, running, tmp_path, 50, **{"consumer.workers": 3})
    rejected = consumer.apply({"consumer.workers": 0, "consumer.ordering": "random"})
    assert set(rejected) == {"consumer.workers", "consumer.ordering"}
    assert "between 1 and 1024" in rejected["consumer.workers"].reason
    wait_until(lambda: recorder.count() >= 50, 60, message="50 handled")
    assert consumer.engine.pool is not None and consumer.engine.pool.size == 3
    assert consumer.engine.dispatcher is not None and consumer.engine.dispatcher.ordering == "partition"
    job.stop()


def test_pause_stays_in_group_and_resume_continues(bootstrap: str, running, tmp_path: Path) -> None:
    consumer, recorder, job = _start(bootstrap, running, tmp_path, 800, delay=0.01, **{
        "consumer.workers": 4, "ykafka.consumer.max.inflight.per.partition": 20, "ykafka.consumer.batch.size": 20})
    wait_until(lambda: recorder.count() >= 100, 60, message="first 100")
    member = consumer.memberid()
    consumer.apply({"consumer.paused": True})
    held = _stable(recorder)
    assert held < 800
    time.sleep(2.0)  # well past a poll cycle: nothing is fetched while paused
    assert recorder.count() == held
    assert consumer.memberid() == member and len(consumer.assignment()) >= 4  # still a member, still assigned
    assert consumer.generation == 1
    consumer.apply({"consumer.paused": False})
    wait_until(lambda: recorder.count() >= 800, 60, message="all handled after resume")
    job.stop()
    assert sorted(recorder.values) == list(range(800))


def test_leave_commits_and_rejoin_resumes_without_loss(bootstrap: str, running, tmp_path: Path) -> None:
    consumer, recorder, job = _start(bootstrap, running, tmp_path, 800, delay=0.01, **{
        "consumer.workers": 4, "ykafka.consumer.max.inflight.per.partition": 20, "ykafka.consumer.batch.size": 20})
    wait_until(lambda: recorder.count() >= 100, 60, message="first 100")
    consumer.apply({"consumer.leave": True})
    wait_until(lambda: consumer._session.left and consumer._session.consumer is None, 20, message="left")
    held = _stable(recorder)
    time.sleep(1.0)
    assert recorder.count() == held < 800
    consumer.apply({"consumer.leave": False})
    wait_until(lambda: recorder.count() >= 800, 60, message="all handled after rejoin")
    job.stop()
    assert consumer.generation == 2
    assert sorted(recorder.values) == list(range(800))  # committed on leave: nothing handled twice


def test_rate_limit_applies_live(bootstrap: str, running, tmp_path: Path) -> None:
    consumer, recorder, job = _start(bootstrap, running, tmp_path, 600, delay=0.0, **{
        "consumer.rate.limit.msgs": 40})
    wait_until(lambda: recorder.count() >= 1, 60, message="first message")
    start_count, start = recorder.count(), time.monotonic()
    time.sleep(2.0)
    rate = (recorder.count() - start_count) / (time.monotonic() - start)
    assert 25 <= rate <= 55, rate
    consumer.apply({"consumer.rate.limit.msgs": 0})
    wait_until(lambda: recorder.count() >= 600, 30, message="all handled once unthrottled")
    job.stop()
    assert sorted(recorder.values) == list(range(600))


def test_fetch_settings_rebuild_the_client_keeping_positions(bootstrap: str, running, tmp_path: Path) -> None:
    consumer, recorder, job = _start(bootstrap, running, tmp_path, 1200, **{
        "consumer.workers": 4, "ykafka.consumer.max.inflight.per.partition": 50})
    wait_until(lambda: recorder.count() >= 150, 60, message="first 150")
    assert consumer.client_config["max.partition.fetch.bytes"] == 1_048_576
    consumer.apply({"consumer.max.partition.fetch.bytes": 4096, "consumer.fetch.wait.max.ms": 50})
    wait_until(lambda: consumer.generation == 2, 30, message="rebuilt client")
    assert consumer.client_config["max.partition.fetch.bytes"] == 4096
    assert consumer.client_config["fetch.wait.max.ms"] == 50
    wait_until(lambda: recorder.count() >= 1200, 90, message="all handled after rebuild")
    job.stop()
    assert sorted(recorder.values) == list(range(1200))


def test_assignment_strategy_change_rejoins_the_group_with_the_new_preference(bootstrap: str, running,
                                                                             tmp_path: Path) -> None:
    """The member leaves and rejoins preferring the new strategy, the old one kept as a fallback so a group
    mid-rollout still agrees; the broker's group (one member) then runs the new strategy (observable on Apache
    Kafka: Tansu pinned a group's first protocol forever). tests/test_consumer_rebalance.py covers cooperative
    groups."""
    consumer, recorder, job = _start(bootstrap, running, tmp_path, 1000, **{
        "consumer.workers": 4, "ykafka.consumer.max.inflight.per.partition": 50})
    wait_until(lambda: recorder.count() >= 150, 60, message="first 150")
    first_member = consumer.memberid()
    assert consumer.client_config["partition.assignment.strategy"] == "range"
    consumer.apply({"consumer.assignment.strategy": "roundrobin"})
    wait_until(lambda: consumer.generation == 2, 30, message="rejoined")
    assert consumer.client_config["partition.assignment.strategy"] == "roundrobin,range"
    wait_until(lambda: recorder.count() >= 1000, 90, message="all handled after rejoin")
    wait_until(lambda: consumer.memberid() is not None, 30, message="new member assigned")
    assert consumer.memberid() != first_member  # a new group member
    assert len(consumer.assignment()) == 16  # the topic and its three retry topics, 4 partitions each
    group = consumer.client_config["group.id"]
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer: a collected client cancels
    described = admin.describe_consumer_groups([group], request_timeout=15)[group].result(20)
    assert described.partition_assignor == "roundrobin" and len(described.members) == 1
    job.stop()
    assert sorted(recorder.values) == list(range(1000))


def test_migration_strategy_lists() -> None:
    from ykafka.consumer.live import migration_strategy

    assert migration_strategy("roundrobin", "range") == "roundrobin,range"
    assert migration_strategy("range", "roundrobin,range") == "range,roundrobin"
    assert migration_strategy("cooperative-sticky", "range") == "cooperative-sticky"
    assert migration_strategy("range", "cooperative-sticky") == "range"
    assert migration_strategy("range", "range") == "range"


def test_ordering_switches_after_drain(bootstrap: str, running, tmp_path: Path) -> None:
    consumer, recorder, job = _start(bootstrap, running, tmp_path, 900, **{
        "consumer.workers": 6, "consumer.ordering": "none", "ykafka.consumer.max.inflight.per.partition": 30})
    wait_until(lambda: recorder.count() >= 150, 60, message="first 150")
    consumer.apply({"consumer.ordering": "key"})
    wait_until(lambda: consumer.engine.dispatcher.ordering == "key", 20, message="ordering switched")
    switched_at = recorder.count()
    wait_until(lambda: recorder.count() >= 900, 60, message="all handled")
    job.stop()
    assert sorted(recorder.values) == list(range(900))
    after = recorder.calls[switched_at:]
    by_key: dict[bytes | None, list[int]] = {}
    for _, m in after:
        by_key.setdefault(m.key(), []).append(int(m.value()))
    assert all(v == sorted(v) for v in by_key.values())  # key order holds from the switch on


def test_paused_at_start_fetches_nothing_until_resumed(bootstrap: str, running, tmp_path: Path) -> None:
    consumer, recorder, job = _start(bootstrap, running, tmp_path, 100, delay=0.0, **{"consumer.paused": True})
    wait_until(lambda: len(consumer.assignment()) == 16, 30, message="assigned")
    time.sleep(1.5)
    assert recorder.count() == 0
    consumer.apply({"consumer.paused": False})
    wait_until(lambda: recorder.count() >= 100, 30, message="all handled once resumed")
    job.stop()
    assert sorted(recorder.values) == list(range(100))
