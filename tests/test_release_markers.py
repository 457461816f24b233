"""Which release markers a client's charts carry (issue 29 item 5): the changes of every namespace that reaches
the client, and a gray release (an operator's or a rollout step's canary) only when it reached that client. The
drawing in a real browser is tests/test_console_rollouts.py."""

from __future__ import annotations

import time
from pathlib import Path

from metaserver.configcenter.readmodel import INSTANCE_LABEL
from metaserver.domain.audit import record
from metaserver.rollouts import markers
from metaserver.storage import db

CLIENT = {"client_id": "pay-1", "ip": "10.0.0.1", "cluster": "dc-a", "group": None, "topics": ["orders", "no way!"],
          "config_release_keys": {"ykafka.topic.refunds": "k1", "application": "k2"}}


def test_a_clients_namespaces_are_global_its_cluster_topics_and_those_it_holds_releases_of() -> None:
    assert markers.client_namespaces(CLIENT) == ["ykafka.global", "ykafka.cluster.dc-a", "ykafka.topic.orders",
                                                 "ykafka.topic.refunds"]
    assert markers.client_namespaces({**CLIENT, "group": "billing", "topics": ["orders"] * 3}) == [
        "ykafka.global", "ykafka.cluster.dc-a", "ykafka.group.billing", "ykafka.topic.orders", "ykafka.topic.refunds"]


def test_a_clients_markers_hold_its_namespaces_changes_and_only_the_gray_releases_that_reached_it(
        tmp_path: Path) -> None:
    engine = db.make_engine(f"sqlite:///{tmp_path / 'ms.db'}")
    db.migrate(engine)
    rows = [("config.set", "ykafka.topic.orders", {"values": {"producer.linger.ms": "9"}}),
            ("config.gray", "ykafka.topic.orders", {"values": {"producer.linger.ms": "30"}, "ips": ["10.0.0.9"]}),
            ("config.gray", "ykafka.topic.orders", {"values": {"producer.linger.ms": "20"}, "ips": None,
                                                    "labels": [INSTANCE_LABEL + "pay-1"]}),  # a rollout's canary
            ("config.rollout.advance", "ykafka.topic.orders", {"percent": 30}),
            ("config.set", "ykafka.topic.other", {"values": {"producer.linger.ms": "9"}}),
            ("cluster.failover", "ykafka.cluster.dc-a", {"values": {"route.active": "standby"}}),
            ("config.set", "ykafka.global", {"values": {"producer.acks": "all"}})]
    with db.write(engine) as conn:
        for action, target, after in rows:
            record(conn, "ops", action, target, {}, after)
    with db.read(engine) as conn:
        found = markers.markers(conn, time.time() - 60, markers.client_namespaces(CLIENT), reaching=CLIENT)
        everyone = markers.markers(conn, time.time() - 60, ["ykafka.topic.orders"])
    assert [m["label"] for m in found] == [
        "release: producer.linger.ms=9", "gray: producer.linger.ms=20", "rollout: advance 30 %",
        "failover: route.active=standby", "release: producer.acks=all"]
    assert [m["label"] for m in everyone][:3] == [  # a topic's page: every gray release of the topic
        "release: producer.linger.ms=9", "gray: producer.linger.ms=30", "gray: producer.linger.ms=20"]
