"""A fatal consumer error ends ``Consumer.run()`` with that error, typed and reported; it is not a clean stop.

On Apache Kafka (this module's broker) a static member is really fenced: a newer consumer joins with its
``group.instance.id`` and the broker refuses the older one, which librdkafka turns into a fatal error. Tansu never
fenced static members, so the first test (kept: it runs on any broker) wraps the real librdkafka consumer so that,
once the messages were handled, its next poll returns the fatal error librdkafka gives a fenced member.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.consumer_fixtures import consumer_config, create_topic, produce, unique, wait_until
from ykafka.consumer import Consumer
from ykafka.errors import KafkaError
from ykafka.transport import Message as RawMessage
from ykafka.transport import RawConsumer, RawKafkaError

pytestmark = pytest.mark.broker("kafka")  # static members fenced by the broker

FENCED = "Fatal consumer error: group.instance.id fenced by another member"


class _FencedLater:
    """The real consumer; once ``armed``, its next poll returns librdkafka's fatal error once."""

    def __init__(self, conf: dict[str, Any], armed: threading.Event) -> None:
        self._real = RawConsumer(conf)
        self._armed = armed

    def _fatal(self) -> RawMessage | None:
        if not self._armed.is_set():
            return None
        self._armed.clear()
        return RawMessage(topic="", partition=-1, error=RawKafkaError(RawKafkaError._FATAL, FENCED, fatal=True))

    def poll(self, timeout: float = -1) -> Any:
        fatal = self._fatal()  # not ``or``: a Message without a value is falsy (its len)
        return fatal if fatal is not None else self._real.poll(timeout)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        fatal = self._fatal()
        return [fatal] if fatal is not None else self._real.consume(num_messages, timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_fatal_error_makes_run_raise_the_typed_error(bootstrap: str, tmp_path: Path) -> None:
    topic, group = unique("fatal"), unique("g")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 5)
    armed = threading.Event()
    consumer = Consumer(consumer_config(bootstrap, group, tmp_path))
    consumer._session.factory = lambda conf: _FencedLater(conf, armed)  # type: ignore[assignment,return-value]
    handled: list[int] = []
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            consumer.run(lambda m: handled.append(1), [topic])
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - what run() ended with is the test's subject
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(handled) >= 5, 60, message="the messages were handled")
        armed.set()
        thread.join(60)
        assert not thread.is_alive(), "run() did not end after the fatal error"
        assert len(outcome) == 1
        error = outcome[0]
        assert isinstance(error, KafkaError), f"run() ended with {error!r}, not the fatal error"
        assert error.fatal and error.name == "_FATAL" and FENCED in str(error)
        reported = [e for e in consumer.runtime.report_body()["extra"]["errors"] if e.get("fatal")]
        assert [e["code"] for e in reported] == ["_FATAL"], reported
    finally:
        consumer.stop()
        thread.join(30)
        consumer.close()


def test_a_member_fenced_by_a_newer_one_with_its_instance_id_ends_run_with_the_brokers_fatal_error(
        bootstrap: str, tmp_path: Path) -> None:
    topic, group = unique("fenced"), unique("g")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 5)
    consumer = Consumer(consumer_config(bootstrap, group, tmp_path, **{"group.instance.id": "member-1"}))
    handled: list[int] = []
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            consumer.run(lambda m: handled.append(1), [topic])
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - what run() ended with is the test's subject
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    rival = RawConsumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": "member-1",
                         "session.timeout.ms": 6000, "auto.offset.reset": "earliest"})
    try:
        wait_until(lambda: len(handled) >= 5, 60, message="the messages were handled")
        rival.subscribe([topic])  # the same static member joins again: the broker fences the running one
        deadline = time.monotonic() + 30
        while thread.is_alive() and time.monotonic() < deadline:
            rival.poll(0.2)
        assert not thread.is_alive(), "run() did not end after the broker fenced the member"
        error = outcome[0]
        assert isinstance(error, KafkaError), f"run() ended with {error!r}, not the fatal error"
        assert error.fatal and error.name == "_FATAL" and "fenced" in str(error), str(error)
        reported = [e for e in consumer.runtime.report_body()["extra"]["errors"] if e.get("fatal")]
        assert [e["code"] for e in reported] == ["_FATAL"], reported
    finally:
        rival.close()
        consumer.stop()
        thread.join(30)
        consumer.close()
