"""One decision, two enforcers (issue 37): the SDK's ACL check and the broker's bindings of the same table
agree, checked as hypothesis properties against an independent model of Kafka's ``StandardAuthorizer``.

Before issue 37 they disagreed: a group grant ``billing-*`` became topic rights on every topic starting
``billing-`` at the broker (another app's ``billing-invoices`` was readable and writable) while the SDK refused
it, and app ``shop``'s transactional-id prefix ``shop`` covered app ``shop-billing``'s ids.
"""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metaserver.kafka import acls as kafka_acls
from metaserver.kafka.acls import Binding
from ykafka import acl, events
from ykafka.consumer.retry import dlq_topic, retry_topic

OPERATIONS = ("produce", "consume", "group")

names = st.text(alphabet="ab.-_", min_size=1, max_size=6).filter(lambda n: acl.name_problem(n) is None)
patterns = st.one_of(names, names.map(lambda n: n + "*"), st.just("*"),
                     st.sampled_from(["__ykafka-retry.*", "_*", "__ykafka-retry.1.a.x", "__ykafka_*",
                                      "__ykafka_clients.a", "__ykafka_trace.*", "__ykafka_metrics"]))


@st.composite
def tables(draw: st.DrawFn) -> dict[str, list[str]]:
    table = {op: draw(st.lists(patterns, max_size=3)) for op in OPERATIONS}
    # the MetaServer refuses to save a produce / consume pattern reaching into the retry namespace
    for op in ("produce", "consume"):
        table[op] = [p for p in table[op] if acl.topic_pattern_problem(p) is None]
    table["group"] = [p for p in table["group"] if acl.pattern_problem(p) is None]
    return table


def kafka_allows(bindings: Iterable[Binding], resource: str, name: str, operation: str) -> bool:
    """Kafka's StandardAuthorizer, written from its documentation, not from ykafka.acl: a DENY binding of that
    resource type naming the operation (or ALL) with a matching pattern refuses it, whatever allows it; else an
    operation is allowed when an ALLOW binding names it (or ALL) with a matching pattern; DESCRIBE is implied
    by READ, WRITE, DELETE and ALTER (for ALLOW only); LITERAL ``*`` matches every name."""
    def named(b: Binding) -> bool:
        return (b.pattern == "LITERAL" and (b.name == "*" or b.name == name)) or \
            (b.pattern == "PREFIXED" and name.startswith(b.name))

    bindings = list(bindings)
    if any(b.permission == "DENY" and b.resource == resource and b.operation in (operation, "ALL") and named(b)
           for b in bindings):
        return False
    for b in bindings:
        if b.permission != "ALLOW" or b.resource != resource:
            continue
        implied = operation == "DESCRIBE" and b.operation in ("READ", "WRITE", "DELETE", "ALTER")
        if b.operation not in (operation, "ALL") and not implied:
            continue
        if named(b):
            return True
    return False


def telemetry_names(apps: Iterable[str]) -> list[str]:
    return [*events.TELEMETRY_TOPICS, *(events.app_topic(kind, a) for a in apps for kind in events.TELEMETRY_KINDS)]


def retry_names(groups: list[str], topics: list[str]) -> list[str]:
    return [n for g in groups for t in topics for n in (retry_topic(g, t, 1), dlq_topic(g, t))]


@settings(max_examples=200, deadline=None)
@given(table=tables(), app_id=names, topics=st.lists(names, min_size=1, max_size=4),
       groups=st.lists(names, min_size=1, max_size=3))
def test_the_broker_allows_exactly_what_the_sdk_allows(table: dict[str, list[str]], app_id: str,
                                                       topics: list[str], groups: list[str]) -> None:
    bindings = kafka_acls.app_bindings(f"app.{app_id}@dc-a.g1", app_id, table)
    candidates = [*topics, *groups, *retry_names(groups, topics), *retry_names(table["group"], topics)]
    for operation in OPERATIONS:
        resource, right = acl.OPERATION_RIGHTS[operation]
        for name in candidates:
            assert acl.check(table, operation, name) == kafka_allows(bindings, resource, name, right), \
                (operation, name)
    # telemetry: the SDK never consumes it, and the broker lets no app read it, whatever the table says
    for name in telemetry_names([app_id, *topics]):
        assert not acl.check(table, "consume", name) and not kafka_allows(bindings, "TOPIC", name, "READ"), name


@settings(max_examples=200, deadline=None)
@given(table=tables(), app_id=names, other=names)
def test_an_app_writes_its_own_telemetry_topics_and_no_other_apps_or_the_shared_ones(
        table: dict[str, list[str]], app_id: str, other: str) -> None:
    """Issue 37: every app could write the shared telemetry topics, so app A's client report, metric or trace
    could claim to be app B's. Now each writes only its own; no table of the MetaServer's but a produce ``*``
    (trusted with every topic) opens another's, and the map app -> topic is one-to-one."""
    bindings = kafka_acls.app_bindings(f"app.{app_id}@dc-a.g1", app_id, table)
    for kind in events.TELEMETRY_KINDS:
        own, theirs = events.app_topic(kind, app_id), events.app_topic(kind, other)
        assert kafka_allows(bindings, "TOPIC", own, "WRITE") and events.topic_owner(own) == app_id
        assert kafka_allows(bindings, "TOPIC", events.TOPICS[kind], "WRITE") == ("*" in table["produce"])
        if other != app_id:
            assert own != theirs
            assert kafka_allows(bindings, "TOPIC", theirs, "WRITE") == ("*" in table["produce"]), (kind, other)
        for name in (own, theirs, events.TOPICS[kind]):
            assert not kafka_allows(bindings, "TOPIC", name, "READ")


@settings(max_examples=150, deadline=None)
@given(groups=st.lists(patterns, min_size=1, max_size=3), topic=names, owner=names)
def test_a_group_grant_never_reaches_a_topic_outside_its_own_retry_namespace(
        groups: list[str], topic: str, owner: str) -> None:
    bindings = kafka_acls.app_bindings("app.x@dc-a.g1", "x", {"group": groups})
    for right in ("READ", "WRITE", "CREATE", "DESCRIBE"):
        assert not kafka_allows(bindings, "TOPIC", topic, right)  # any plain topic, any other app's
        reachable = kafka_allows(bindings, "TOPIC", retry_topic(owner, topic, 1), right)
        assert reachable == (owner in groups), (groups, owner)  # a literal group reaches its own retries only


@given(a=names, b=names)
def test_no_groups_retry_namespace_and_no_apps_transactional_ids_contain_anothers(a: str, b: str) -> None:
    if a != b:
        assert not acl.retry_prefix(a).startswith(acl.retry_prefix(b))
        assert not acl.transactional_prefix(a).startswith(acl.transactional_prefix(b))


@given(pattern=patterns, group=names, topic=names)
def test_no_saveable_topic_pattern_but_star_reaches_a_retry_topic(pattern: str, group: str, topic: str) -> None:
    if acl.topic_pattern_problem(pattern) is None and pattern != "*":
        assert not acl.matches(pattern, retry_topic(group, topic, 1))
        assert not acl.matches(pattern, dlq_topic(group, topic))
        assert not any(acl.matches(pattern, name) for name in telemetry_names([group]))


def test_readmes_group_pattern_opens_no_other_apps_topic_and_shop_cannot_fence_shop_billing() -> None:
    """The two holes as issue 37 found them, on the bindings."""
    billing = kafka_acls.app_bindings("app.b@dc-a.g1", "b", {"consume": ["orders"], "group": ["billing-*"]})
    for right in ("READ", "WRITE", "CREATE", "DESCRIBE"):
        assert not kafka_allows(billing, "TOPIC", "billing-invoices", right)
    assert kafka_allows(billing, "GROUP", "billing-eu", "READ")
    shop = kafka_acls.app_bindings("app.shop@dc-a.g1", "shop", {"produce": ["shop.*"]})
    assert kafka_allows(shop, "TRANSACTIONAL_ID", "shop/tx-1", "WRITE")
    assert not kafka_allows(shop, "TRANSACTIONAL_ID", "shop-billing/tx-1", "WRITE")
    assert not kafka_allows(shop, "TRANSACTIONAL_ID", "shop-billing-tx-1", "WRITE")
    refused = acl.topic_pattern_problem("__ykafka-retry.7.billing.*")
    assert refused is not None and refused.startswith("reaches into __ykafka-retry.*")


def test_the_admin_apis_acl_refuses_a_topic_pattern_reaching_into_the_retry_namespace() -> None:
    import pydantic

    from metaserver.schemas import Acl

    for bad in ("_*", "__*", "__ykafka-retry.*", "__ykafka-retry.7.billing.orders.dlq"):
        try:
            Acl(consume=[bad])
        except pydantic.ValidationError as exc:
            message = exc.errors()[0]["msg"]  # what the admin API answers (never the input back)
            assert message.startswith("Value error, pattern 1: reaches into __ykafka-retry.*")
            assert bad not in message.replace("__ykafka-retry.*", "")
        else:
            raise AssertionError(f"{bad!r} was accepted")
    assert Acl(consume=["*"], group=["_*", "billing-*"]).group == ["_*", "billing-*"]  # groups are not topics


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables(), topic=st.one_of(names, st.sampled_from(["__ykafka_clients.a", "__ykafka_trace",
                                                              "__ykafka-retry.1.a.x.retry.1"])),
       group=names, clusters=st.lists(names, max_size=2), cluster=names)
def test_a_per_app_config_key_opens_the_namespaces_of_exactly_what_the_acl_allows(
        table: dict[str, list[str]], topic: str, group: str, clusters: list[str], cluster: str) -> None:
    """The config service's check of an app's own key (metaserver/configcenter/keyscope.py) is the same decision:
    a topic's namespace iff the app may produce or consume it, a group's iff it may join it, a cluster's iff its
    grant reached it, ``ykafka.global`` always; anything else (``application``) never."""
    from metaserver.configcenter.keyscope import KeyScope, scope_json

    key = KeyScope.parse("app", scope_json("ykafka", table, clusters))
    assert key.allows(f"ykafka.topic.{topic}") == (acl.check(table, "produce", topic)
                                                   or acl.check(table, "consume", topic))
    assert key.allows(f"ykafka.group.{group}") == acl.check(table, "group", group)
    assert key.allows(f"ykafka.cluster.{cluster}") == (cluster in clusters)
    assert key.allows("ykafka.global") and not key.allows("application") and not key.allows(f"other.topic.{topic}")
