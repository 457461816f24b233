"""The Producer is a drop-in for confluent-kafka's: same calls, same callbacks, real broker, real MetaServer."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError as CKError

from tests.sdk_fixtures import check_stream, read_topic, wait_until
from tests.support import LocalStack
from ykafka import AclDenied, ClosedError, ConfigError, Producer
from ykafka.auth import GrantStore


def _topic(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_produce_poll_flush_len_and_callbacks_like_confluent(sdk_stack: LocalStack) -> None:
    topic = _topic("basic")
    reports: list[tuple[Any, str, int, bytes]] = []

    def on_delivery(err: Any, msg: Any) -> None:
        reports.append((err, msg.topic(), msg.offset(), msg.value()))

    with Producer(sdk_stack.client_config()) as producer:
        for i in range(100):
            if i % 2:
                producer.produce(topic, value=f"k{i % 5}:{i // 5}".encode(), key=f"k{i % 5}", on_delivery=on_delivery)
            else:
                producer.produce(topic, f"k{i % 5}:{i // 5}", f"k{i % 5}", callback=on_delivery)
        assert len(producer) > 0
        assert producer.flush(15) == 0
        assert len(producer) == 0
        meta = producer.list_topics(topic, timeout=10)
        assert topic in meta.topics
        assert producer.route(topic) == "dc-a"
    assert len(reports) == 100
    assert all(err is None and t == topic and off >= 0 for err, t, off, _ in reports)
    records = read_topic(sdk_stack.clusters["dc-a"], topic, 100)
    assert check_stream(records, 100) == {"received": 100, "unique": 100, "lost": 0, "duplicated": 0,
                                          "disorder": 0}
    with pytest.raises(ClosedError):
        producer.produce(topic, b"late")


def test_callbacks_fire_from_poll_not_from_produce(sdk_stack: LocalStack) -> None:
    topic = _topic("pollcb")
    fired: list[str] = []
    producer = Producer(sdk_stack.client_config())
    try:
        producer.produce(topic, b"x:0", on_delivery=lambda err, msg: fired.append("cb"))
        wait_until(lambda: producer.poll(0.1) or fired, timeout=15, message="delivery via poll")
        assert fired == ["cb"]
    finally:
        producer.close()


def test_purge_reports_purged_messages(sdk_stack: LocalStack) -> None:
    errors: list[int] = []
    conf = sdk_stack.client_config(**{"producer.linger.ms": 60_000})
    with Producer(conf) as producer:
        for i in range(10):
            producer.produce(_topic("purge"), f"p:{i}".encode(), on_delivery=lambda err, msg: errors.append(err.code()))
        producer.purge(in_queue=True, in_flight=False)
        producer.poll(1)
    assert errors == [CKError._PURGE_QUEUE] * 10


def test_acl_denied_raises_and_sends_nothing(sdk_stack: LocalStack) -> None:
    app = sdk_stack.new_app(produce=["allowed-*"])
    allowed, denied = _topic("allowed"), _topic("denied")
    with Producer(sdk_stack.client_config(app)) as producer:
        with pytest.raises(AclDenied) as info:
            producer.produce(denied, b"secret:0")
        assert info.value.resource == denied and info.value.operation == "produce"
        producer.produce(allowed, b"ok:0")
        assert producer.flush(15) == 0
        assert len(producer) == 0
    assert len(read_topic(sdk_stack.clusters["dc-a"], allowed, 1)) == 1
    assert read_topic(sdk_stack.clusters["dc-a"], denied, 0, timeout=2) == []


def test_bad_local_config_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="ykafka.app.idd"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "ykafka.app.idd": "x"})
    with pytest.raises(ConfigError, match="producer.acks"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "producer.acks": "2"})
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        Producer({"ykafka.cache.dir": "/tmp/none"}, **{})


def test_grant_cached_with_owner_only_mode(sdk_stack: LocalStack) -> None:
    conf = sdk_stack.client_config()
    topic = f"cachemode-{uuid.uuid4().hex[:8]}"
    sdk_stack.push(f"topic:{topic}", {"producer.linger.ms": "7"})
    with Producer(conf) as producer:
        assert producer.runtime.grant is not None
        producer.produce(topic, b"x")
        assert producer.flush(15) == 0
    store = GrantStore(Path(conf["ykafka.cache.dir"]), sdk_stack.app_id, [sdk_stack.metaserver])
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    for folder in (store.folder, store.folder.parent, Path(conf["ykafka.cache.dir"])):  # 0700 all the way up
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, folder
    config_files = list(Path(conf["ykafka.cache.dir"]).glob("config/*/*.json"))
    assert config_files, "config namespaces are cached per config center"
    for path in config_files:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


def test_close_releases_the_librdkafka_handles_at_once(sdk_stack: LocalStack) -> None:
    """A closed Producer's clients (and its event sink's) give back their threads and broker connections at
    close, not whenever the garbage collector reaches them (brokers stopping later waited ~5 s on them)."""
    topic = f"close-{uuid.uuid4().hex[:8]}"
    with Producer(sdk_stack.client_config(**{"trace.sample.rate": "1"})) as producer:
        producer.produce(topic, b"x")
        assert producer.flush(15) == 0
        handles = [client.rd for client in producer._all_clients()]
        sink = producer._obs._sink  # the trace / metrics events' own producer (made when the first is sent)
        assert sink is not None
        handles.append(sink._producer)
    assert len(handles) >= 2
    for rd in handles:
        with pytest.raises(RuntimeError, match="closed"):
            rd.poll(0)
