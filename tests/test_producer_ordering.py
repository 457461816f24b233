"""The Producer's own client keeps a key's records in order when it is not idempotent: with ``acks`` other than
``all`` librdkafka refuses idempotence, and a plain producer pipelining requests can store a batch the broker refused
with a retriable error behind the next batch of its partition. With disaster recovery on (the default) the client
keeps one request in flight then, unless the application set it under either of librdkafka's names
(docs/disaster-recovery.md, *Guarantees and limits*). The live push of ``producer.acks`` is
tests/test_producer_hot.py's; here the settings come from the application's own config, nothing reachable needed (the
client is built by the send)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ykafka


@pytest.mark.parametrize(("given", "in_force"), [
    ({"acks": "1"}, ("1", False, 1)),
    ({"acks": "1", "max.in.flight": 3}, ("1", False, None)),  # the alias: librdkafka keeps the application's 3
    ({"acks": "1", "max.in.flight.requests.per.connection": 2}, ("1", False, 2)),
    ({"acks": "all"}, ("all", "true", None)),  # idempotent: librdkafka's own ordering, its default 5 in flight
])
def test_one_request_in_flight_when_not_idempotent(given: dict[str, Any], in_force: tuple[Any, ...],
                                                   tmp_path: Path) -> None:
    producer = ykafka.Producer({"bootstrap.servers": "127.0.0.1:9", "ykafka.cache.dir": str(tmp_path), **given})
    try:
        producer.produce("ordering-check", b"x", b"k")
        settings = [c["settings"] for c in producer.clients()]
        assert [(s.get("acks"), s.get("enable.idempotence"), s.get("max.in.flight.requests.per.connection"))
                for s in settings] == [in_force]
    finally:
        producer.purge()
        producer.close(1)
