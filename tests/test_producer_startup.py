"""Start-up of the Producer: one librdkafka producer per cluster, and the first message right behind it.

Counts are of real handles: every producer the SDK builds goes through :func:`ykafka.transport.new_producer`
(docs/benchmarks.md, "Start-up", says why the order matters: an idempotent handle whose first message comes
late waits two producer-id ticks, ~1 s, instead of one).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import ykafka.transport as transport
from tests.sdk_fixtures import wait_until
from tests.support import LocalStack
from ykafka import Producer

#: the roles whose handles carry the application's messages (the event sink's ``events`` handle carries
#: the SDK's own events, is not idempotent and takes no producer id)
DATA_ROLES = ("producer", "dr")


def _data_handles(built: dict[tuple[str, str], int]) -> dict[str, int]:
    per_cluster: dict[str, int] = {}
    for (role, bootstrap), count in built.items():
        if role in DATA_ROLES:
            per_cluster[bootstrap] = per_cluster.get(bootstrap, 0) + count
    return per_cluster


def _first_acks(producer: Producer, topics: list[str]) -> list[Any]:
    acked: list[Any] = []
    for topic in topics:
        producer.produce(topic, b"first", on_delivery=lambda err, _msg: acked.append(err))
    wait_until(lambda: producer.poll(0.05) >= 0 and len(acked) == len(topics), timeout=20,
               message="first acknowledgements")
    return acked


def test_startup_builds_one_librdkafka_producer_per_cluster(sdk_stack: LocalStack) -> None:
    topics = [f"startup-{i}-{uuid.uuid4().hex[:8]}" for i in range(3)]
    transport.producers_built(reset=True)
    producer = Producer(sdk_stack.client_config())
    try:
        assert producer.disaster_recovery is not None  # the default: the engine's handles are counted too
        assert _first_acks(producer, topics) == [None, None, None]
        assert producer.flush(10) == 0
        built = transport.producers_built()
        bootstrap = sdk_stack.bootstrap(producer.route(topics[0]))
        assert {producer.route(t) for t in topics} == {producer.route(topics[0])}
        assert _data_handles(built) == {bootstrap: 1}, built
        assert built.get(("producer", bootstrap)) == 1, built
        assert sum(count for (role, _), count in built.items() if role == "events") <= 1, built
        assert len(producer.clients()) == 1
    finally:
        producer.close()


def test_first_message_follows_the_handle_build(sdk_stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing slow runs between building a cluster's handle and handing it the first message: the
    disaster-recovery link of the cluster (its spill queue on disk) is already open when the handle is
    built, and the handle's first call is that message's produce."""
    seen: list[tuple[str, Any]] = []
    holder: list[Producer] = []

    class Recording(transport.RawProducer):  # type: ignore[misc, valid-type]
        def __init__(self, conf: dict[str, Any]) -> None:
            super().__init__(conf)
            self.role_data = not str(conf.get("client.id", "")).startswith("ykafka-events")  # not the sink's
            if self.role_data and holder:
                dr = holder[0].disaster_recovery
                assert dr is not None
                seen.append(("built", sorted(dr._links)))

        def produce(self, *args: Any, **kwargs: Any) -> None:
            if self.role_data:
                seen.append(("produce", args[0] if args else kwargs.get("topic")))
            super().produce(*args, **kwargs)

    monkeypatch.setattr(transport, "RawProducer", Recording)
    topic = f"startup-order-{uuid.uuid4().hex[:8]}"
    producer = Producer(sdk_stack.client_config())
    holder.append(producer)
    try:
        assert _first_acks(producer, [topic]) == [None]
        cluster = producer.route(topic)
        assert seen[:2] == [("built", [cluster]), ("produce", topic)], seen
    finally:
        producer.close()


class _FakeHandle:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, float]] = []
        self.fail = fail

    def list_topics(self, topic: str, timeout: float) -> None:
        self.calls.append((topic, timeout))
        if self.fail:
            raise transport.KafkaException("unreachable")


def test_hastener_asks_twice_for_the_topic_and_stops_on_failure_or_join() -> None:
    handle = _FakeHandle()
    hastener = transport.ProducerIdHastener("orders")
    hastener.attach(handle)  # type: ignore[arg-type]
    wait_until(lambda: hastener.done, timeout=5, message="the hastener's two requests")
    hastener.join()
    assert handle.calls == [("orders", transport.ProducerIdHastener.TIMEOUT_S)] * 2

    failing = _FakeHandle(fail=True)
    hastener = transport.ProducerIdHastener("orders")
    hastener.attach(failing)  # type: ignore[arg-type]
    wait_until(lambda: hastener.done, timeout=5, message="the failed request")
    assert hastener.done and failing.calls == [("orders", transport.ProducerIdHastener.TIMEOUT_S)]  # then the timer

    stopped = _FakeHandle()
    hastener = transport.ProducerIdHastener("orders")
    hastener.DELAYS_S = (0.5, 0.5)
    hastener.attach(stopped)  # type: ignore[arg-type]
    hastener.join()  # the handle is about to be closed: nothing more is asked of it
    assert hastener.done and stopped.calls == []

    hastener = transport.ProducerIdHastener("orders")
    hastener.attach(None)  # the build failed
    assert hastener.done
    hastener.join()


def test_a_new_idempotent_client_gets_its_producer_id_asked_for(sdk_stack: LocalStack) -> None:
    """The Producer's new idempotent handle gets a hastener (joined at close); a non-idempotent one none."""
    topic = f"startup-id-{uuid.uuid4().hex[:8]}"
    producer = Producer(sdk_stack.client_config())
    try:
        assert _first_acks(producer, [topic]) == [None]
        (client,) = producer._clients.values()
        hastener = client.hastener
        assert hastener is not None
    finally:
        producer.close()
    assert hastener.done
    with Producer(sdk_stack.client_config(**{"enable.idempotence": False, "acks": "1"})) as plain:
        assert _first_acks(plain, [topic]) == [None]
        (client,) = plain._clients.values()
        assert client.hastener is None
