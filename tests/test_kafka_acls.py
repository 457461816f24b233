"""The ACL table → Kafka ACL bindings mapping and the names of issued principals (pure logic)."""

from __future__ import annotations

from metaserver.kafka import acls as kafka_acls
from metaserver.kafka.acls import Binding


def test_each_operation_maps_to_its_kafka_bindings() -> None:
    got = kafka_acls.app_bindings("app.orders@dc-a.g1", "orders",
                                  {"produce": ["orders.*", "audit"], "consume": ["*"], "group": ["billing"]})
    who = "User:app.orders@dc-a.g1"
    mine = {(b.resource, b.name, b.pattern, b.operation) for b in got if not b.name.startswith("__ykafka_")}
    assert mine == {
        ("TOPIC", "orders.", "PREFIXED", "WRITE"), ("TOPIC", "orders.", "PREFIXED", "DESCRIBE"),
        ("TOPIC", "audit", "LITERAL", "WRITE"), ("TOPIC", "audit", "LITERAL", "DESCRIBE"),
        ("TOPIC", "*", "LITERAL", "READ"), ("TOPIC", "*", "LITERAL", "DESCRIBE"),
        ("GROUP", "billing", "LITERAL", "READ"),
        *(("TOPIC", "__ykafka-retry.7.billing.", "PREFIXED", op) for op in ("READ", "WRITE", "DESCRIBE", "CREATE")),
        ("TRANSACTIONAL_ID", "orders/", "PREFIXED", "WRITE"), ("TRANSACTIONAL_ID", "orders/", "PREFIXED", "DESCRIBE"),
    }
    assert {b.principal for b in got} == {who} and {b.host for b in got} == {"*"}
    assert {b.permission for b in got if not b.name.startswith("__ykafka_")} == {"ALLOW"}
    telemetry = {(b.name, b.pattern, b.operation, b.permission) for b in got if b.name.startswith("__ykafka_")}
    # its own telemetry topics only (issue 37: the shared ones were writable by every app, so any app could speak
    # for another), and no READ on any telemetry topic even with consume '*'
    assert telemetry == {
        *((f"{t}.orders", "LITERAL", op, "ALLOW") for t in ("__ykafka_clients", "__ykafka_metrics", "__ykafka_trace")
          for op in ("WRITE", "DESCRIBE")),
        *((t, "PREFIXED", "READ", "DENY") for t in ("__ykafka_clients", "__ykafka_metrics", "__ykafka_trace"))}


def test_a_consumer_only_app_gets_no_transactional_id() -> None:
    got = kafka_acls.app_bindings("app.c@x.g1", "c", {"consume": ["t"], "group": ["g"]})
    assert not any(b.resource == "TRANSACTIONAL_ID" for b in got)


def test_patterns_kafka_cannot_express_are_refused_with_the_reason() -> None:
    for good in ("orders", "orders.*", "*", ".hidden*"):
        assert kafka_acls.pattern_problem(good) is None, good
    for bad in ("or*ders", "**", "a b", ""):
        problem = kafka_acls.pattern_problem(bad)
        assert problem is not None and "Kafka ACLs match only a literal name, a prefix" in problem, bad


def test_the_reconciler_owns_every_principal_but_those_issued_for_a_sibling_registry_name() -> None:
    user = kafka_acls.username("orders.eu", "dc-a.east", 3)
    assert user == "app.orders.eu@dc-a.east.g3" and kafka_acls.user_cluster(user) == "dc-a.east"
    assert kafka_acls.owned("User:" + user, "dc-a.east", ["dc-a"])
    assert not kafka_acls.owned("User:" + user, "dc-a", ["dc-a.east"])  # its sibling's reconciler keeps it
    assert kafka_acls.owned("User:" + user, "dc-a", [])  # issued for a cluster elsewhere: foreign here
    for foreign in ("User:*", "User:alice", "User:app.x", "User:app.x@dc-a.gx", "User:ANONYMOUS"):
        assert kafka_acls.owned(foreign, "dc-a", ["dc-b"]), foreign
        assert kafka_acls.foreign(foreign, ["dc-a", "dc-b"]), foreign
    assert not kafka_acls.foreign("User:" + user, ["dc-a.east"])


def test_bindings_round_trip_through_json() -> None:
    b = Binding("User:app.a@c.g1", "TOPIC", "t", "LITERAL", "WRITE")
    assert Binding.from_json(b.as_json()) == b
