"""The key catalog: parsing, scopes, layer validation and precedence (pure logic)."""

from __future__ import annotations

import pytest

from ykafka import catalog
from ykafka.catalog import Scope, ScopeKind
from ykafka.errors import InvalidConfigValue, UnknownConfigKey


def test_every_design_key_is_in_the_catalog() -> None:
    design_keys = {
        "route.cluster", "route.standby", "route.failover", "producer.acks", "producer.idempotence",
        "producer.partitioner", "producer.partitions.exclude", "producer.linger.ms", "producer.batch.size",
        "producer.compression", "producer.socket.send.buffer.bytes", "consumer.socket.receive.buffer.bytes",
        "producer.rate.limit.msgs", "producer.rate.limit.bytes", "consumer.assignment.strategy",
        "consumer.fetch.max.bytes", "consumer.max.partition.fetch.bytes", "consumer.fetch.wait.max.ms",
        "consumer.rate.limit.msgs", "consumer.workers", "consumer.ordering", "consumer.paused", "consumer.leave",
        "consumer.retry.backoff.ms", "consumer.retry.max.attempts", "consumer.dlq.enabled", "trace.enabled",
        "trace.sample.rate", "topic.grade", "auth.enabled", "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
    }
    assert design_keys <= set(catalog.KEYS)


@pytest.mark.parametrize(("name", "raw", "expected"), [
    ("producer.acks", "-1", "all"),
    ("producer.acks", "1", "1"),
    ("producer.idempotence", "FALSE", False),
    ("producer.partitions.exclude", "3, 1,2", (3, 1, 2)),
    ("producer.partitions.exclude", "", ()),
    ("consumer.retry.backoff.ms", "1000,5000,30000", (1000, 5000, 30000)),
    ("consumer.workers", "16", 16),
    ("trace.sample.rate", "0.25", 0.25),
    ("route.cluster", "dc-b", "dc-b"),
])
def test_parse_accepts_and_types(name: str, raw: str, expected: object) -> None:
    assert catalog.parse(name, raw) == expected


@pytest.mark.parametrize(("name", "raw", "reason"), [
    ("producer.acks", "2", "must be one of 0, 1, all"),
    ("consumer.workers", "0", "must be between 1 and 1024"),
    ("consumer.workers", "many", "expected an integer"),
    ("trace.sample.rate", "1.5", "must be between 0 and 1"),
    ("trace.sample.rate", "nan", "must be between 0 and 1"),
    ("consumer.retry.backoff.ms", "", "at least one integer"),
    ("producer.partitions.exclude", "1,x", "list item expected an integer"),
    ("route.cluster", "dc a", "expected a cluster name"),
    ("producer.idempotence", "maybe", "expected a boolean"),
])
def test_parse_rejects_with_reason(name: str, raw: str, reason: str) -> None:
    with pytest.raises(InvalidConfigValue) as info:
        catalog.parse(name, raw)
    assert reason in str(info.value)
    assert info.value.key == name and info.value.value == raw


def test_unknown_key_and_scope_restrictions() -> None:
    with pytest.raises(UnknownConfigKey, match="not in the ykafka key catalog"):
        catalog.parse("producer.turbo", "1")
    with pytest.raises(InvalidConfigValue, match="cannot be set at scope cluster:dc-a"):
        catalog.parse("topic.grade", "P0", Scope.parse("cluster:dc-a"))
    assert catalog.parse("topic.grade", "P0", catalog.GLOBAL) == "P0"


def test_a_security_switch_is_never_taken_from_a_config_namespace() -> None:
    """Issue 37: ``auth.enabled`` from any namespace (the config service's Open API token could write one) is
    refused by the catalog the SDK and the MetaServer both use; only a scope-less parse (the MetaServer's own
    admin API, its database) gives a value."""
    assert sorted(catalog.LOCKED) == ["auth.enabled"]
    for scope in (catalog.GLOBAL, Scope.parse("topic:orders")):
        with pytest.raises(InvalidConfigValue, match=r"security switch: changed only through the MetaServer's admin"):
            catalog.parse("auth.enabled", "false", scope)
    assert catalog.parse("auth.enabled", "false") is False
    update = catalog.validate_layer({"auth.enabled": "false", "producer.acks": "1"}, None, catalog.GLOBAL)
    assert update.values == {"producer.acks": "1"} and set(update.rejected) == {"auth.enabled"}
    from ykafka.hotconfig import HotConfig

    client = HotConfig()  # a client's layers: the namespace's value is refused and reported, never applied
    client.apply("ykafka.global", {"auth.enabled": "false", "producer.acks": "1"}, release_key="r1")
    assert client.layer(catalog.GLOBAL) == {"producer.acks": "1"}
    assert [(r.key, r.reason) for r in client.rejections()] == [("auth.enabled", catalog.LOCKED_REASON)]


def test_scope_parsing_and_namespaces() -> None:
    assert Scope.parse("global").namespace() == "ykafka.global"
    assert Scope.parse("topic:orders").namespace() == "ykafka.topic.orders"
    assert Scope.parse("group:billing").kind is ScopeKind.GROUP
    assert str(Scope.parse("cluster:dc-a")) == "cluster:dc-a"
    for bad in ("topic", "topic:", "planet:x", "global:x", "topic:a b"):
        with pytest.raises(ValueError, match="invalid scope"):
            Scope.parse(bad)


def test_validate_layer_keeps_previous_good_value_for_rejected_keys() -> None:
    first = catalog.validate_layer({"producer.acks": "1", "consumer.workers": "8"})
    assert first.values == {"producer.acks": "1", "consumer.workers": 8} and not first.rejected
    second = catalog.validate_layer({"producer.acks": "7", "consumer.workers": "4", "x.unknown": "1"},
                                    previous=first.values)
    assert second.values == {"producer.acks": "1", "consumer.workers": 4}
    assert set(second.rejected) == {"producer.acks"}
    assert second.unknown == ["x.unknown"]


def test_resolve_most_specific_layer_wins_then_grade_then_defaults() -> None:
    topic = {"producer.acks": "0", "topic.grade": "P0"}
    cluster = {"producer.acks": "1", "producer.linger.ms": 50}
    glob = {"producer.linger.ms": 1, "producer.compression": "lz4"}
    merged = catalog.resolve([topic, cluster, glob])
    assert merged["producer.acks"] == "0"
    assert merged["producer.linger.ms"] == 50
    assert merged["producer.compression"] == "lz4"
    assert merged["trace.enabled"] is True and merged["trace.sample.rate"] == 1.0  # from grade P0
    assert merged["consumer.workers"] == catalog.KEYS["consumer.workers"].default
    explicit = catalog.resolve([{"topic.grade": "P0", "trace.sample.rate": 0.5}])
    assert explicit["trace.sample.rate"] == 0.5


def test_rdkafka_properties_for_producer_and_consumer() -> None:
    eff = catalog.resolve([{"producer.acks": "1", "producer.compression": "zstd",
                            "consumer.fetch.wait.max.ms": 100}])
    props = catalog.rdkafka_properties(eff, "producer.")
    assert props["acks"] == "1" and props["compression.type"] == "zstd"
    assert props["enable.idempotence"] is False  # idempotence needs acks=all
    assert "socket.send.buffer.bytes" not in props  # 0 = system default
    cons = catalog.rdkafka_properties(eff, "consumer.")
    assert cons["fetch.wait.max.ms"] == 100 and "acks" not in cons


def test_render_round_trips() -> None:
    for name, raw in [("producer.partitions.exclude", "1,2"), ("consumer.paused", "true"),
                      ("producer.rate.limit.msgs", "500"), ("trace.sample.rate", "0.5")]:
        assert catalog.render(name, catalog.parse(name, raw)) == raw


def test_the_catalog_says_how_each_change_applies() -> None:
    """Clients dispatch on Key.applies: the consumer rebuilds its handle for REBUILD and REJOIN keys."""
    kinds = catalog.by_apply(["consumer.fetch.max.bytes", "consumer.assignment.strategy", "consumer.workers",
                              "producer.acks", "route.cluster", "not.a.key"], "consumer.")
    assert kinds[catalog.Apply.REBUILD] == ["consumer.fetch.max.bytes"]
    assert kinds[catalog.Apply.REJOIN] == ["consumer.assignment.strategy"]
    assert kinds[catalog.Apply.IN_PLACE] == ["consumer.workers"]
    assert kinds[catalog.Apply.SWITCH] == []  # route.cluster is not a consumer.* key
    assert catalog.applies("producer.acks") is catalog.Apply.REBUILD and catalog.applies("nope") is None
    assert catalog.value({}, "consumer.workers") == 4
    assert catalog.value({"consumer.workers": 9}, "consumer.workers") == 9


def test_rdkafka_aliases_come_from_the_keys() -> None:
    producer = catalog.rdkafka_aliases("producer.")
    assert producer["acks"] == producer["request.required.acks"] == "producer.acks"
    assert producer["queue.buffering.max.ms"] == "producer.linger.ms"
    assert catalog.rdkafka_aliases("consumer.")["partition.assignment.strategy"] == "consumer.assignment.strategy"
    assert not set(producer) & set(catalog.rdkafka_aliases("consumer."))


def test_optional_parsers() -> None:
    assert catalog.optional_text("  ") is None and catalog.optional_text(" x ") == "x"
    port = catalog.optional(catalog.int_range(0, 65535))
    assert port("") is None and port(None) is None and port("8080") == 8080
    with pytest.raises(ValueError, match="between 0 and 65535"):
        port("70000")
