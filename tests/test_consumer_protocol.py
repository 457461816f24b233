"""The new consumer group protocol (KIP-848, ``group.protocol=consumer``): the broker owns the session timeout, the
heartbeat interval and the assignor, so hot config that sets them for such a group is refused, by the MetaServer
before it is written (a group scope whose members report the protocol) and by the consumer itself (any scope)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.helpers import create_topic, unique, wait_until
from tests.support import LocalStack
from ykafka import catalog
from ykafka.consumer import Consumer
from ykafka.transport import KafkaException, RawConsumer


def test_librdkafka_refuses_each_key_the_catalog_says_the_broker_owns() -> None:
    """The catalog's claim checked against librdkafka itself: each broker-owned key's property is refused under the
    consumer protocol and accepted under the classic one."""
    for name in catalog.BROKER_OWNED:
        spec = catalog.KEYS[name]
        assert spec.rdkafka is not None and spec.applies is catalog.Apply.REJOIN and "refused" in spec.help
        conf = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g", "log_level": 0,
                spec.rdkafka: catalog.render(name, spec.default)}
        with pytest.raises(KafkaException, match="not supported for `group.protocol=consumer`"):
            RawConsumer({**conf, "group.protocol": "consumer"})
        RawConsumer(conf).close()
    assert catalog.consumer_protocol({"group.protocol": " Consumer "})
    assert not catalog.consumer_protocol({}) and not catalog.consumer_protocol({"group.protocol": "classic"})


def _report(stack: LocalStack, app_id: str, client_id: str) -> dict[str, Any]:
    return next((c for c in stack.client_reports(app_id) if c["client_id"] == client_id), {})


def test_broker_owned_hot_config_is_refused_for_a_consumer_protocol_group(sdk_stack: LocalStack) -> None:
    topic, group, classic = unique("kip848"), unique("kip848-g"), unique("classic-g")
    create_topic(sdk_stack.bootstrap(), topic, 2)
    app = sdk_stack.new_app([], [topic], [group, classic])
    consumer = Consumer(sdk_stack.client_config(app, **{
        "group.id": group, "group.protocol": "consumer", "ykafka.client.id": f"{app[0]}-new", "log_level": 0}))
    old = Consumer(sdk_stack.client_config(app, **{
        "group.id": classic, "session.timeout.ms": 6000, "ykafka.client.id": f"{app[0]}-classic", "log_level": 0}))
    try:
        consumer.subscribe([topic])
        old.subscribe([topic])
        consumer.poll(0.1)
        # the handle is built without them (librdkafka refuses a consumer-protocol handle that sets any)
        assert not {"partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms"} \
            & set(consumer.client_config)
        consumer.runtime.report_now()
        wait_until(lambda: (_report(sdk_stack, app[0], f"{app[0]}-new").get("extra") or {}).get("group_protocol")
                   == "consumer", 30, message="the member's protocol reported")

        # the MetaServer: refused before anything is written, with the reason, for that group only
        resp = sdk_stack.admin("POST", "/v1/admin/config", {
            "scope": f"group:{group}", "set": {"consumer.session.timeout.ms": "10000",
                                               "consumer.assignment.strategy": "cooperative-sticky"}})
        assert resp.status_code == 422, resp.text
        errors = resp.json()["errors"]
        assert set(errors) == {"consumer.session.timeout.ms", "consumer.assignment.strategy"}
        assert all("group.protocol=consumer" in why and "owned by the broker" in why for why in errors.values())
        sdk_stack.push(f"group:{classic}", {"consumer.session.timeout.ms": "10000"})  # a classic group: accepted
        sdk_stack.push(f"group:{group}", {"consumer.workers": "3"})  # keys the member owns still go through

        # the consumer: a scope the MetaServer cannot tie to the group (here the topic's) is refused by the member
        sdk_stack.push(f"topic:{topic}", {"consumer.heartbeat.interval.ms": "700"})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            consumer.poll(0.1)
            old.poll(0.1)
            if consumer.engine.effective.get("consumer.workers") == 3 \
                    and old.client_config.get("heartbeat.interval.ms") == 700 \
                    and old.client_config.get("session.timeout.ms") == 10000:
                break
        assert consumer.engine.effective.get("consumer.workers") == 3
        assert (old.client_config.get("session.timeout.ms"), old.client_config.get("heartbeat.interval.ms")) \
            == (10000, 700)  # the classic member rejoined with both
        assert "heartbeat.interval.ms" not in consumer.client_config
        consumer.runtime.report_now()
        wait_until(lambda: any("consumer.heartbeat.interval.ms" in e and "owned by the broker" in e
                               for e in _report(sdk_stack, app[0], f"{app[0]}-new").get("errors") or []),
                   30, message="the refusal reported")
        # Consumer.apply (the drop-in entry point) refuses them too
        refused = consumer.apply({"consumer.assignment.strategy": "range", "consumer.workers": 2})
        assert set(refused) == {"consumer.assignment.strategy"} and "KIP-848" in refused[
            "consumer.assignment.strategy"].reason
    finally:
        consumer.close()
        old.close()
