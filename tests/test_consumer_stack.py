"""The Consumer against the whole local stack: MetaServer grant + ACL, hot config through the config center."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.consumer_fixtures import Recorder, create_topic, produce, unique, wait_until
from tests.support import LocalStack, tansu_group_quirk
from ykafka.admin.client import AdminClient
from ykafka.consumer import Consumer
from ykafka.errors import AclDenied


def _conf(stack: LocalStack, group: str, app: tuple[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    conf = stack.client_config(**{
        "group.id": group, "auto.offset.reset": "earliest", **tansu_group_quirk(stack.bootstrap()),
        "ykafka.consumer.commit.interval.ms": 200, **extra})
    if app is not None:
        conf["ykafka.app.id"], conf["ykafka.app.secret"] = app
    return conf


def _admin(stack: LocalStack) -> AdminClient:
    return AdminClient(stack.metaserver, stack.admin_token)


def test_acl_refuses_groups_and_topics_before_anything_is_sent(stack: LocalStack) -> None:
    admin = _admin(stack)
    app_id = f"app-{uuid.uuid4().hex[:8]}"
    secret = admin.create_app(app_id)["secret"]
    admin.set_acl(app_id, produce=[], consume=["ok.*"], group=["gok-*"])
    with pytest.raises(AclDenied, match="may not group 'gbad-1'"):
        Consumer(_conf(stack, "gbad-1", (app_id, secret)))
    consumer = Consumer(_conf(stack, "gok-1", (app_id, secret)))
    try:
        with pytest.raises(AclDenied, match="may not consume 'orders'"):
            consumer.subscribe(["ok.orders", "orders"])
        with pytest.raises(AclDenied, match="may not consume"):
            consumer.subscribe(["^ok\\..*"])  # a regex needs a grant on every topic
        assert consumer._session.consumer is None  # no librdkafka handle was built: nothing reached a broker
        consumer.subscribe(["ok.orders"])
        assert consumer._session.topics == ["ok.orders"]
    finally:
        consumer.close()


def test_operator_changes_reach_a_running_consumer_by_scope_and_by_host(stack: LocalStack, running,
                                                                         tmp_path: Path) -> None:
    admin = _admin(stack)
    topic, group = unique("hot"), unique("g")
    bootstrap = stack.clusters["dc-a"]
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, 300, keys=30)
    recorder = Recorder(delay=0.002)
    consumer = Consumer(_conf(stack, group, **{"consumer.workers": 2}))
    running(consumer, recorder, [topic])
    wait_until(lambda: recorder.count() >= 300, 60, message="first 300")
    engine = consumer.engine
    assert engine.pool is not None and engine.pool.alive == 2

    admin.push_config(f"group:{group}", {"consumer.workers": "6", "consumer.paused": "true"})
    wait_until(lambda: engine.pool.alive == 6 and consumer._session.operator_paused, 20, message="group scope")
    produce(bootstrap, topic, 100, keys=30, start=300)
    admin.push_config(f"topic:{topic}", {"consumer.workers": "3"})  # the topic scope beats the group scope
    wait_until(lambda: engine.pool.alive == 3, 20, message="topic scope")
    assert recorder.count() == 300  # still paused: nothing new fetched

    # gray release: a rate limit for another host does not touch this one; for this host it does
    admin.push_config(f"group:{group}", {"consumer.rate.limit.msgs": "7"}, ips=["198.51.100.77"])
    admin.push_config(f"group:{group}", {"consumer.paused": "false"})
    wait_until(lambda: recorder.count() >= 400, 30, message="resumed")
    assert engine.bucket.rate == 0
    admin.abandon_gray(f"group:{group}")
    admin.push_config(f"group:{group}", {"consumer.rate.limit.msgs": "7"}, ips=[consumer.runtime.ip])
    wait_until(lambda: engine.bucket.rate == 7, 20, message="gray rule for this host")
    assert sorted(recorder.values) == list(range(400))


def test_route_cluster_moves_the_consumer_to_another_cluster(stack: LocalStack, running, tmp_path: Path) -> None:
    admin = _admin(stack)
    topic, group = unique("route"), unique("g")
    create_topic(stack.clusters["dc-a"], topic, 2)
    create_topic(stack.clusters["dc-b"], topic, 2)
    produce(stack.clusters["dc-a"], topic, 50, keys=5)
    recorder = Recorder()
    consumer = Consumer(_conf(stack, group))
    running(consumer, recorder, [topic])
    wait_until(lambda: recorder.count() >= 50, 60, message="dc-a messages")
    assert consumer.cluster == "dc-a"
    admin.push_config(f"topic:{topic}", {"route.cluster": "dc-b"})
    wait_until(lambda: consumer.cluster == "dc-b", 20, message="route switch")
    produce(stack.clusters["dc-b"], topic, 50, keys=5, start=50)
    wait_until(lambda: recorder.count() >= 100, 60, message="dc-b messages")
    assert consumer.client_config["bootstrap.servers"] == stack.clusters["dc-b"]
    assert sorted(recorder.values) == list(range(100))


def test_worker_changes_pushed_through_the_metaserver_while_messages_flow(stack: LocalStack, running) -> None:
    """The operator's path, under traffic: a producer keeps writing while ``consumer.workers`` is pushed 2 -> 6 -> 3
    through the MetaServer. Every message is handled exactly once, each key in order, never two at a time."""
    admin = _admin(stack)
    topic, group = unique("workers"), unique("g")
    bootstrap = stack.clusters["dc-a"]
    create_topic(bootstrap, topic, 4)
    recorder = Recorder(delay=0.02)  # a backlog of seconds: the changes land while messages are in flight
    consumer = Consumer(_conf(stack, group, **{"consumer.workers": 2, "consumer.ordering": "key"}))
    running(consumer, recorder, [topic])
    engine = consumer.engine
    sent = 0

    def flow(count: int) -> None:
        nonlocal sent
        produce(bootstrap, topic, count, keys=30, start=sent)
        sent += count

    flow(300)
    wait_until(lambda: recorder.count() >= 20 and engine.pool is not None and engine.pool.alive == 2, 60,
               message="flowing on 2 workers")
    for workers in (6, 3):
        admin.push_config(f"group:{group}", {"consumer.workers": str(workers)})
        deadline = time.monotonic() + 20
        while not (engine.pool is not None and engine.pool.alive == workers):  # messages keep coming meanwhile
            assert time.monotonic() < deadline, f"consumer.workers={workers} never applied"
            flow(10)
            time.sleep(0.1)
        assert recorder.count() < sent  # the change landed while messages were still in flight
        flow(100)
    wait_until(lambda: recorder.count() >= sent, 60, message="every message handled")
    assert sorted(recorder.values) == list(range(sent))  # lost = 0, duplicated = 0
    assert all(values == sorted(values) for values in recorder.by_key.values())  # each key in order
    assert not recorder.overlaps  # never two of one key at once
