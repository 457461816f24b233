"""``ykafka.message.id``: the Producer stamps a unique ``ykafka-id`` on every message (real broker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.dr_fixtures import create_topic, read_all, unique
from tests.support import Broker
from ykafka import Producer
from ykafka.consumer.dedupe import Dedupe, message_id


def _ids(msg: Any) -> list[bytes]:
    return [v for k, v in (msg.headers() or []) if k == "ykafka-id"]


def test_every_message_gets_one_unique_id_and_a_given_id_is_kept(one_broker: Broker, tmp_path: Path) -> None:
    topic = unique("msgid")
    create_topic(one_broker.bootstrap, topic, 3)
    producer = Producer({"bootstrap.servers": one_broker.bootstrap, "ykafka.cache.dir": str(tmp_path),
                         "ykafka.report.enabled": False, "ykafka.message.id": True, "log_level": 0})
    try:
        for i in range(300):
            key = None if i % 2 else str(i % 7).encode()
            headers = [("app", b"x")] if i % 3 == 0 else None
            producer.produce(topic, str(i).encode(), key=key, headers=headers)
        producer.produce(topic, b"given", headers={"ykafka-id": b"order-42"})
        producer.produce(topic, b"given-again", headers=[("ykafka-id", b"order-42")])  # a re-send of it
        assert producer.flush(30) == 0
    finally:
        producer.close()
    records = read_all(one_broker.bootstrap, topic, expect=302)
    assert len(records) == 302
    assert all(len(_ids(m)) == 1 for m in records)  # exactly one id each, never a second one added
    by_value = {m.value(): m for m in records}
    stamped = {_ids(by_value[str(i).encode()])[0] for i in range(300)}
    assert len(stamped) == 300  # unique
    assert _ids(by_value[b"given"]) == [b"order-42"] == _ids(by_value[b"given-again"])
    assert [v for k, v in by_value[b"0"].headers() if k == "app"] == [b"x"]  # the caller's headers kept
    # consumer side: the id is what de-duplication keys on, so the re-send is skipped
    handled: list[bytes] = []
    handler = Dedupe()(lambda msg: handled.append(msg.value()))
    for m in sorted(records, key=lambda m: (m.value() != b"given", m.value())):
        handler(m)
    assert message_id(by_value[b"given"]) == "order-42"
    assert len(handled) == 301 and b"given" in handled and b"given-again" not in handled


def test_without_the_option_nothing_is_stamped(one_broker: Broker, tmp_path: Path) -> None:
    topic = unique("msgid-off")
    create_topic(one_broker.bootstrap, topic, 1)
    with Producer({"bootstrap.servers": one_broker.bootstrap, "ykafka.cache.dir": str(tmp_path),
                   "ykafka.report.enabled": False, "log_level": 0}) as producer:
        for i in range(20):
            producer.produce(topic, str(i).encode())
        assert producer.flush(30) == 0
    records = read_all(one_broker.bootstrap, topic, expect=20)
    assert len(records) == 20 and not any(_ids(m) for m in records)
