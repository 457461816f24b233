"""Partitioners: Java-compatible murmur2 (checked against an independent port of Kafka's Utils.murmur2 and
Kafka's own test vectors, and on a real broker), consistent hashing, round robin, sticky, exclusions."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from tests.sdk_fixtures import create_topic, read_topic
from tests.support import LocalStack
from ykafka import Producer
from ykafka.partitioner import Picker, java_partition, murmur2

# --- an independent reference: Kafka's org.apache.kafka.common.utils.Utils.murmur2, line by line ------------

def _int(x: int) -> int:
    """Java int overflow."""
    x &= 0xFFFFFFFF
    return x - 0x100000000 if x >= 0x80000000 else x


def _ushr(x: int, n: int) -> int:
    """Java ``>>>`` on an int."""
    return (x & 0xFFFFFFFF) >> n


def kafka_murmur2(data: bytes) -> int:
    length = len(data)
    seed = _int(0x9747B28C)
    m = 0x5BD1E995
    r = 24
    h = _int(seed ^ length)
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = _int((data[i4 + 0] & 0xFF) + ((data[i4 + 1] & 0xFF) << 8) + ((data[i4 + 2] & 0xFF) << 16)
                 + ((data[i4 + 3] & 0xFF) << 24))
        k = _int(k * m)
        k = _int(k ^ _ushr(k, r))
        k = _int(k * m)
        h = _int(h * m)
        h = _int(h ^ k)
    rest = length % 4
    # the switch falls through: case 3 -> case 2 -> case 1
    if rest == 3:
        h = _int(h ^ ((data[(length & ~3) + 2] & 0xFF) << 16))
    if rest >= 2:
        h = _int(h ^ ((data[(length & ~3) + 1] & 0xFF) << 8))
    if rest >= 1:
        h = _int(h ^ (data[length & ~3] & 0xFF))
        h = _int(h * m)
    h = _int(h ^ _ushr(h, 13))
    h = _int(h * m)
    h = _int(h ^ _ushr(h, 15))
    return h


def kafka_partition(key: bytes, partitions: int) -> int:
    """BuiltInPartitioner.partitionForKey: Utils.toPositive(Utils.murmur2(key)) % numPartitions."""
    return (kafka_murmur2(key) & 0x7FFFFFFF) % partitions


KAFKA_VECTORS = {  # UtilsTest.testMurmur2
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

KEYS = [f"key-{i}-{uuid.UUID(int=i * 7919).hex[:i % 17]}".encode() for i in range(10_000)]


@pytest.mark.parametrize(("data", "expected"), list(KAFKA_VECTORS.items()))
def test_murmur2_matches_kafka_vectors(data: bytes, expected: int) -> None:
    assert kafka_murmur2(data) == expected
    assert murmur2(data) == expected


def test_10000_keys_match_the_java_partition() -> None:
    for partitions in (1, 3, 6, 12, 50):
        picker = Picker("murmur2", partitions)
        for key in KEYS:
            expected = kafka_partition(key, partitions)
            assert murmur2(key) == kafka_murmur2(key)
            assert java_partition(key, partitions) == expected
            assert picker(key) == expected


def test_exclusion_rehashes_keys_over_the_rest_deterministically() -> None:
    picker = Picker("murmur2", 6, exclude=(1, 4))
    again = Picker("murmur2", 6, exclude=(4, 1))
    for key in KEYS[:2000]:
        part = picker(key)
        assert part == [0, 2, 3, 5][kafka_partition(key, 4)] == again(key)
    assert Picker("murmur2", 3, exclude=(0, 1, 2))(b"k") in (0, 1, 2)  # all excluded: exclusion ignored


def test_consistent_hashing_moves_only_the_excluded_partitions_keys() -> None:
    full = Picker("consistent", 8)
    fewer = Picker("consistent", 8, exclude=(3,))
    moved = 0
    for key in KEYS[:4000]:
        before, after = full(key), fewer(key)
        assert after != 3
        if before != 3:
            assert before == after  # keys of other partitions stay put
        else:
            moved += 1
    assert 200 < moved < 900  # about an eighth of the keys lived on partition 3
    shares = Counter(full(key) for key in KEYS)
    assert min(shares.values()) > 10_000 / 8 * 0.5


def test_round_robin_random_and_sticky() -> None:
    rr = Picker("round_robin", 4, exclude=(2,))
    seq = [rr(b"same") for _ in range(9)]
    assert sorted(set(seq)) == [0, 1, 3] and Counter(seq) == Counter({0: 3, 1: 3, 3: 3})
    rnd = Picker("random", 5, exclude=(0,))
    assert set(rnd(b"same") for _ in range(400)) == {1, 2, 3, 4}
    sticky = Picker("sticky", 10)
    assert len({sticky(f"k{i}".encode()) for i in range(50)}) <= 2  # ignores keys, sticks for a while
    assert Picker("murmur2", 0)(b"k") == -1  # partition count unknown: librdkafka decides


def test_broker_side_java_compatible_partitions_for_10000_keys(sdk_stack: LocalStack) -> None:
    topic = f"java-{uuid.uuid4().hex[:8]}"
    create_topic(sdk_stack.clusters["dc-a"], topic, 6)
    with Producer(sdk_stack.client_config(**{"producer.linger.ms": 20})) as producer:
        for key in KEYS:
            while True:
                try:
                    producer.produce(topic, key, key)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        assert producer.flush(30) == 0
    records = read_topic(sdk_stack.clusters["dc-a"], topic, len(KEYS), timeout=60)
    assert len(records) == len(KEYS)
    wrong = [(r.key, r.partition) for r in records if r.partition != kafka_partition(r.key.encode(), 6)]
    assert wrong == []
