"""The console's group page on Apache Kafka: a group with a live ykafka consumer is STABLE with its member, as the
broker describes it (Tansu described such a group with 0 members)."""

from __future__ import annotations

import threading
from typing import Any

from tests.console_fixtures import Console
from tests.helpers import create_topic, unique, wait_until
from ykafka import Consumer, Producer


def test_a_group_with_a_live_consumer_is_stable_with_its_member_on_its_page(kafka_console: Console,
                                                                             page: Any) -> None:
    st = kafka_console.stack
    bootstrap = st.clusters["dc-a"]
    topic, group = unique("k-console"), unique("k-console-g")
    create_topic(bootstrap, topic, 2)
    app = st.new_app([topic], [topic], [group])
    seen: list[bytes] = []
    consumer = Consumer(st.client_config(app, **{
        "group.id": group, "auto.offset.reset": "earliest", "ykafka.consumer.retry.topics": False,
        "ykafka.client.id": f"{app[0]}-member"}))
    worker = threading.Thread(target=consumer.run, args=(lambda m: seen.append(m.value()), [topic]), daemon=True)
    try:
        with Producer(st.client_config(app)) as producer:
            for i in range(10):
                producer.produce(topic, f"m{i}".encode(), f"k{i}".encode())
            assert producer.flush(30) == 0
        worker.start()
        wait_until(lambda: len(seen) == 10, 60, message="the member read all 10")
        kafka_console.login(page, "viewer")
        page.goto(f"{kafka_console.url}/console/groups/{group}?cluster=dc-a")
        state = page.locator("#group-state").inner_text()
        kafka_console.shot(page, "group-kafka")
        assert "On dc-a: state STABLE, 1 live member" in state, state  # what the broker describes
        assert f"{app[0]}-member" in page.locator("body").inner_text()  # its ykafka consumer, from its reports
    finally:
        consumer.stop()
        worker.join(30)
        consumer.close()
