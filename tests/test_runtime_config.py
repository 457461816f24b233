"""Pure logic of the client core: local config parsing, scoped layers, precedence, rejections."""

from __future__ import annotations

from pathlib import Path

import pytest

from ykafka import catalog
from ykafka.config import load
from ykafka.errors import ConfigError
from ykafka.hotconfig import HotConfig
from ykafka.runtime import Runtime


def test_local_config_splits_options_catalog_keys_and_passthrough() -> None:
    cfg = load({"bootstrap.servers": "h:1", "acks": "1", "linger.ms": 7, "producer.compression": "lz4",
                "message.max.bytes": 2_000_000, "ykafka.throttle.max.wait.ms": 100}, "producer", env={})
    assert cfg.catalog_defaults == {"producer.acks": "1", "producer.linger.ms": 7, "producer.compression": "lz4"}
    assert cfg.rdkafka == {"bootstrap.servers": "h:1", "message.max.bytes": 2_000_000}
    assert cfg.get("ykafka.throttle.max.wait.ms") == 100 and cfg.local_mode
    assert cfg.local_clusters() == {"default": "h:1"} and cfg.local_default_cluster == "default"


def test_identity_from_env_and_errors_name_the_key() -> None:
    env = {"YKAFKA_APP_ID": "a1", "YKAFKA_APP_SECRET": "s", "YKAFKA_METASERVER": "http://m:1/"}
    cfg = load({}, "producer", env=env)
    assert (cfg.app_id, cfg.app_secret, cfg.metaserver, cfg.local_mode) == ("a1", "s", "http://m:1", False)
    with pytest.raises(ConfigError, match="unknown ykafka option 'ykafka.typo'"):
        load({"bootstrap.servers": "h:1", "ykafka.typo": 1}, "producer", env={})
    with pytest.raises(ConfigError, match="producer.linger.ms"):
        load({"bootstrap.servers": "h:1", "producer.linger.ms": "soon"}, "producer", env={})
    with pytest.raises(ConfigError, match="ykafka.app.secret are required"):
        load({"ykafka.metaserver": "http://m:1"}, "producer", env={})
    with pytest.raises(ConfigError, match="http"):
        load({"ykafka.metaserver": "m:1"}, "producer", env={})
    with pytest.raises(ConfigError, match="ykafka.local.default.cluster"):
        load({"bootstrap.servers": "h:1", "ykafka.local.default.cluster": "nope"}, "producer", env={})


def test_local_clusters_for_local_mode() -> None:
    cfg = load({"ykafka.local.clusters": "a=h:1,h:2;b=h:3"}, "consumer", env={})
    assert cfg.local_clusters() == {"a": "h:1,h:2", "b": "h:3"} and cfg.local_default_cluster == "a"


def test_precedence_topic_group_cluster_global_local_default() -> None:
    hot = HotConfig({"consumer.workers": 2, "producer.linger.ms": 11})
    assert hot.resolve("t", "g", "c")["consumer.workers"] == 2
    hot.apply("ykafka.global", {"consumer.workers": "3", "producer.linger.ms": "12"})
    hot.apply("ykafka.cluster.c", {"consumer.workers": "4"})
    hot.apply("ykafka.group.g", {"consumer.workers": "5"})
    hot.apply("ykafka.topic.t.with.dots", {"consumer.workers": "6"})
    assert hot.resolve("t.with.dots", "g", "c")["consumer.workers"] == 6
    assert hot.resolve("other", "g", "c")["consumer.workers"] == 5
    assert hot.resolve("other", "h", "c")["consumer.workers"] == 4
    assert hot.resolve("other", "h", "d")["consumer.workers"] == 3
    assert hot.resolve("other")["producer.linger.ms"] == 12
    assert hot.resolve("other")["producer.batch.size"] == catalog.KEYS["producer.batch.size"].default
    assert hot.sources("t.with.dots", "g", "c")["consumer.workers"] == "ykafka.topic.t.with.dots"
    hot.apply("ykafka.global", {})
    assert hot.resolve("x")["producer.linger.ms"] == 11
    assert hot.sources("x")["producer.linger.ms"] == "local"


def test_invalid_value_rejected_previous_kept_and_version_moves_only_on_change() -> None:
    hot = HotConfig()
    seen: list[int] = []
    hot.add_version_listener(seen.append)
    hot.apply("ykafka.topic.t", {"producer.acks": "1"}, "r1")
    v1 = hot.version
    event = hot.apply("ykafka.topic.t", {"producer.acks": "bogus", "unknown.key": "x"}, "r2")
    assert event is not None and event.changed == {} and [r.key for r in event.rejected] == ["producer.acks"]
    assert hot.version == v1 and seen == [v1]
    assert hot.resolve("t")["producer.acks"] == "1"
    rej = hot.rejections()[-1]
    assert (rej.namespace, rej.value, rej.release_key) == ("ykafka.topic.t", "bogus", "r2")
    assert "must be one of" in rej.reason
    # a key not allowed at this scope is rejected too (route.cluster is not a cluster-scope key)
    hot.apply("ykafka.cluster.c", {"route.cluster": "x"})
    assert hot.rejections()[-1].reason.startswith("cannot be set at scope cluster:c")


def test_runtime_local_mode_routes_and_rejects_unknown_clusters(tmp_path: Path) -> None:
    rt = Runtime.from_conf({"ykafka.local.clusters": "a=h:1;b=h:2", "ykafka.cache.dir": str(tmp_path)},
                           "producer")
    rt.start()
    try:
        assert rt.route(topic="t") == "a" and rt.clusters()["b"].bootstrap_servers == "h:2"
        rt.hot.apply("ykafka.topic.t", {"route.cluster": "b"})
        assert rt.route(topic="t") == "b"
        rt.hot.apply("ykafka.topic.t", {"route.cluster": "zz"})
        assert rt.route(topic="t") == "b"  # previous good value kept
        assert "unknown cluster 'zz'" in rt.hot.rejections()[-1].reason
        props = rt.rdkafka_config("b", {"acks": "1"})
        assert props["bootstrap.servers"] == "h:2" and props["acks"] == "1"
        body = rt.report_body()
        assert body["errors"] and body["errors"][0].startswith("config_rejected ykafka.topic.t route.cluster='zz'")
        rt.check_acl("produce", "anything")  # local mode: no ACL
    finally:
        rt.close()
