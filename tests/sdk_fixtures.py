"""Fixtures of the SDK-core / producer tests: a private stack (``tests.support.LocalStack``: two clusters on the
module's broker kind, ``pytest.mark.broker``, the real config service, the real MetaServer) on free ports, a
private config service, and broker-side readers that count every message. Processes are stopped by their own pid.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.helpers import create_topic as create_topic
from tests.helpers import wait_until as wait_until
from tests.support import ConfigService, LocalStack, broker_kind, new_stack, start_config_service


def _sdk_stack(tmp_path_factory: pytest.TempPathFactory, broker: str) -> Iterator[LocalStack]:
    st = new_stack(tmp_path_factory.mktemp(f"sdkstack-{broker}"), app_id=f"app-{uuid.uuid4().hex[:8]}", broker=broker)
    try:
        yield st.up()
    finally:
        st.down()


@pytest.fixture(scope="session")
def tansu_sdk_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from _sdk_stack(tmp_path_factory, "tansu")


@pytest.fixture(scope="session")
def kafka_sdk_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from _sdk_stack(tmp_path_factory, "kafka")


@pytest.fixture(scope="module")
def sdk_stack(request: pytest.FixtureRequest) -> LocalStack:
    """A second whole stack, private to the SDK-core and console tests (their hot-config pushes, client reports and
    console pages stay apart from the shared ``stack``), on the module's broker kind; the same code starts it."""
    found: LocalStack = request.getfixturevalue(f"{broker_kind(request)}_sdk_stack")
    return found


@pytest.fixture
def config_service(tmp_path: Path) -> Iterator[ConfigService]:
    svc = start_config_service(tmp_path / "cc")
    try:
        yield svc
    finally:
        svc.stop()


# --- broker side ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: str | None
    value: str


def read_topic(bootstrap: str, topic: str, expected: int, timeout: float = 30.0,
               settle: float = 0.5) -> list[Record]:
    """Every record of ``topic`` (all partitions, from the beginning) once ``expected`` were seen and
    ``settle`` seconds brought nothing more (so duplicates beyond ``expected`` are counted too)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    partitions: list[int] = []
    while time.monotonic() < deadline and not partitions:
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        if meta is not None and meta.error is None:
            partitions = sorted(meta.partitions)
        else:
            time.sleep(0.2)
    if not partitions:
        return []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": False})  # assigned: no group join
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    out: list[Record] = []
    quiet_since: float | None = None
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(num_messages=1000, timeout=0.2)
            got = False
            for msg in batch:
                if msg.error() is not None:
                    continue
                got = True
                key = msg.key()
                out.append(Record(msg.partition(), msg.offset(), key.decode() if key is not None else None,
                                  msg.value().decode()))
            if got:
                quiet_since = None
            elif len(out) >= expected:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= settle:
                    break
    finally:
        consumer.close()
    return out


def check_stream(records: list[Record], sent: int) -> dict[str, int]:
    """Loss / duplicates / per-key order over records whose value is ``<key>:<seq>`` (seq per key from 0)."""
    seen: dict[str, list[tuple[int, int, int]]] = {}
    values = [r.value for r in records]
    for r in records:
        key, _, seq = r.value.rpartition(":")
        seen.setdefault(key, []).append((r.partition, r.offset, int(seq)))
    unique = set(values)
    disorder = 0
    for items in seen.values():
        by_partition: dict[int, list[tuple[int, int]]] = {}
        for part, off, seq in items:
            by_partition.setdefault(part, []).append((off, seq))
        for rows in by_partition.values():
            seqs = [seq for _, seq in sorted(rows)]
            disorder += sum(1 for a, b in zip(seqs, seqs[1:], strict=False) if b < a)
    return {"received": len(values), "unique": len(unique), "lost": sent - len(unique),
            "duplicated": len(values) - len(unique), "disorder": disorder}
