"""Private clusters for disaster-recovery tests and benchmarks (``tests.support.Broker``), and the readers and
counters they check with.

The session ``brokers`` fixture is shared by every test, so chaos tests that kill, freeze and restart a
cluster start their own here. Chaos and DR tests use durable clusters: Apache Kafka (one KRaft node per cluster,
logs on disk) unless the module is marked ``pytest.mark.broker("tansu")`` (two Tansu brokers on the S3 engine over
a local S3 server): an acknowledged message survives the kill, so every count is strict.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from tests import toxiproxy
from tests.helpers import create_topic as create_topic
from tests.helpers import unique as unique
from tests.support import Broker, broker_kind, brokers


@pytest.fixture(scope="session")
def kafka_durable_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Broker]]:
    """dc-a has a second listener that advertises a proxy's port (``Broker.proxied``: inner and outer port), so a
    test can put a Toxiproxy in front of it (tests/test_dr_network.py) without a cluster of its own."""
    ports: dict[str, int] = {}

    def prepare(stack: Any) -> None:
        ports["inner"], ports["outer"] = toxiproxy.proxied_listener(stack.cfg.clusters["dc-a"])

    with brokers(["dc-a", "dc-b"], tmp_path_factory.mktemp("durable-kafka"), broker="kafka",
                 prepare=prepare) as started:
        started["dc-a"].proxied = (ports["inner"], ports["outer"])
        yield started


@pytest.fixture(scope="session")
def tansu_durable_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Broker]]:
    pytest.importorskip("moto", reason="moto[server] (dev extra) runs the durable clusters' local S3 server")
    with brokers(["dc-a", "dc-b"], tmp_path_factory.mktemp("durable"), storage="durable") as started:
        yield started


@pytest.fixture(scope="module")
def durable_pool(request: pytest.FixtureRequest) -> dict[str, Broker]:
    """``dc-a`` and ``dc-b``: durable clusters started once and shared by every chaos and DR test of the session
    (each test on its own topics): one Apache Kafka node each, or on a module marked ``broker("tansu")`` two Tansu
    brokers each on one local S3 server. A test may kill or freeze them; the next test gets them running again (what
    they acknowledged is still there)."""
    found: dict[str, Broker] = request.getfixturevalue(f"{broker_kind(request, 'kafka')}_durable_pool")
    return found


@pytest.fixture
def dc_brokers(durable_pool: dict[str, Broker]) -> dict[str, Broker]:
    """Two durable clusters ``dc-a`` (primary) and ``dc-b`` (standby), running."""
    return {name: broker.ready() for name, broker in durable_pool.items()}


@pytest.fixture
def one_broker(durable_pool: dict[str, Broker]) -> Broker:
    """One durable cluster (the pool's ``dc-a``), running."""
    return durable_pool["dc-a"].ready()


def read_all(bootstrap: str, topic: str, expect: int | None = None, idle_s: float = 2.0,
             timeout_s: float = 60.0) -> list[Message]:
    """Every record of ``topic`` from the beginning (assign, no group join), in partition order."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic, timeout=10)
    if topic not in meta.topics or meta.topics[topic].error is not None:
        return []
    parts = sorted(meta.topics[topic].partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("dr-read"),
                         "enable.auto.commit": False,  # assigned: no group join
                         # not shorter: Tansu's S3 engine answers very frequent fetches with partial data, and a
                         # reader polling every 50 ms stalled mid-topic (records missing although stored)
                         "fetch.wait.max.ms": 500, "enable.partition.eof": False})
    out: list[Message] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        while time.monotonic() < deadline:
            batch = consumer.consume(1000, 0.2)
            good = [m for m in batch if m.error() is None]
            for m in batch:
                err = m.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"read error: {err}")
            if good:
                out.extend(good)
                last = time.monotonic()
            elif time.monotonic() - last > idle_s and (expect is None or len(out) >= expect):
                break
    finally:
        consumer.close()
    return out


def partition_counts(bootstrap: str, topic: str, records: Iterable[Message]) -> dict[int, tuple[int, int, int]]:
    """Per partition: (records read, low watermark, high watermark): a loss's evidence, whether the broker holds
    what the reader did not see or never stored it."""
    read: dict[int, int] = {}
    for m in records:
        read[m.partition()] = read.get(m.partition(), 0) + 1
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("dr-marks")})
    try:
        parts = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions
        out = {}
        for p in sorted(parts):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            out[p] = (read.get(p, 0), low, high)
        return out
    finally:
        consumer.close()


def tally(sent: Iterable[Any], delivered: Iterable[Any]) -> dict[str, int]:
    """sent / delivered / lost / duplicated, counting every id end to end."""
    sent_list = list(sent)
    seen: dict[Any, int] = {}
    for item in delivered:
        seen[item] = seen.get(item, 0) + 1
    sent_set = set(sent_list)
    return {
        "sent": len(sent_list),
        "delivered": sum(1 for s in sent_set if s in seen),
        "lost": sum(1 for s in sent_set if s not in seen),
        "duplicated": sum(n - 1 for n in seen.values() if n > 1),
        "unexpected": sum(1 for s in seen if s not in sent_set),
    }


def env_without_kafka_debug() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")}


#: make_engine options that mean the catalog's defaults (health.probe.interval.ms, health.down.failures,
#: health.down.after.ms, spill.after.ms); make_engine's own defaults are tighter, so tests run faster
DEFAULT_HEALTH: dict[str, Any] = {"probe_s": 0.5, "down_failures": 3, "down_after_s": 2.0, "spill_after_ms": 10_000}


def make_engine(bootstraps: dict[str, str], route: Any, spill_root: Path, *, spill_after_ms: int = 2000,
                probe_s: float = 0.2, down_failures: int = 2, down_after_s: float = 1.0,
                client_conf: dict[str, Any] | None = None, **options: Any) -> Any:
    """A standalone DisasterRecovery over plain confluent-kafka producers (no MetaServer); ``client_conf``: more
    librdkafka settings for every client of every cluster (``acks``, ...)."""
    from ykafka.dr.engine import DisasterRecovery, DrOptions, RouteSpec
    from ykafka.dr.health import HealthPolicy

    spec_of = route if callable(route) else (lambda _topic: route)
    assert isinstance(spec_of(""), RouteSpec)
    options.setdefault("progress_interval_s", 1.0)
    return DisasterRecovery(
        lambda cluster: {"bootstrap.servers": bootstraps[cluster], "linger.ms": 5, "log_level": 0,
                         "partitioner": "murmur2_random", **(client_conf or {})},
        spec_of, DrOptions(spill_root, **options), spill_after_ms=lambda _c: spill_after_ms,
        health_policy=lambda _c: HealthPolicy(down_failures=down_failures, down_after_s=down_after_s,
                                              probe_interval_s=probe_s, probe_timeout_s=0.5))


def overtakes(records: Iterable[tuple[bytes | None, bytes | None]]) -> list[tuple[bytes | None, int, int]]:
    """Per key, where the first time a value appears breaks the order it was produced in (values "<n>[:...]"):
    (key, value, the larger value seen before it). Duplicates (at-least-once) are allowed; overtaking is not."""
    seen: set[bytes | None] = set()
    last: dict[bytes | None, int] = {}
    found: list[tuple[bytes | None, int, int]] = []
    for key, value in records:
        if value in seen:
            continue
        seen.add(value)
        number = int((value or b"0").split(b":")[0])  # "<n>" or "<n>:<padding>"
        if number < last.get(key, -1):
            found.append((key, number, last[key]))
        last[key] = max(number, last.get(key, -1))
    return found


def first_occurrence_ordered(records: Iterable[tuple[bytes | None, bytes | None]]) -> bool:
    """Per key, the first time each value appears follows the order it was produced in."""
    return not overtakes(records)


def strict_count(sent: Iterable[int], values: Iterable[int], acked_before: set[int]) -> dict[str, int]:
    """sent / delivered / lost / duplicated / retried / unexpected, over message numbers read back.

    A second copy is legitimate only for a message in flight when its cluster went away: the broker stored it
    (durable) but its acknowledgement died with the connection, so the client sent it again (spilled and replayed,
    or failed over). Those are counted apart as ``retried``, each with exactly two copies and never acknowledged
    before the break (``acked_before``); any other copy counts in ``duplicated``, which must be 0."""
    values = list(values)
    counts = tally(sent, values)
    copies: dict[int, int] = {}
    for v in values:
        copies[v] = copies.get(v, 0) + 1
    retried = {v for v, n in copies.items() if n == 2 and v not in acked_before}
    counts["retried"] = len(retried)
    counts["duplicated"] = sum(n - 1 for v, n in copies.items() if n > 1 and v not in retried)
    return counts


def key_overtakes(records: Iterable[Message]) -> list[tuple[bytes | None, int, int]]:
    """:func:`overtakes` over records in each partition's log order."""
    ordered = sorted(records, key=lambda m: (m.partition() or 0, m.offset() or 0))
    return overtakes((m.key(), m.value()) for m in ordered)


def in_key_order(records: Iterable[Message]) -> bool:
    """Per key, in each partition's log order, the first copy of every value follows the send order."""
    return not key_overtakes(records)
