"""Partition choice, changeable live per topic (``producer.partitioner``, ``producer.partitions.exclude``).

``murmur2`` is the Java client's default partitioner for keyed messages
(``toPositive(murmur2(key)) % numPartitions``), so Java and Python producers put a key on the same
partition. With no partitions excluded the producer lets librdkafka do it (``partitioner=murmur2_random``,
identical for keyed messages, sticky for keyless ones) and no Python runs per message; the pickers
below are used for the other strategies and whenever partitions are excluded, in which case keyed
messages re-hash deterministically over the remaining partitions.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import random
import time
from collections.abc import Sequence

import structlog

log = structlog.get_logger(__name__)

STRATEGIES = ("murmur2", "consistent", "random", "round_robin", "sticky")
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
STICKY_SWITCH_S = 0.010  # as librdkafka's sticky.partitioning.linger.ms default
CONSISTENT_VNODES = 64


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (signed 32-bit result, as Java returns it)."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    return number & 0x7FFFFFFF


def java_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's Java producer picks for a keyed record."""
    return to_positive(murmur2(key)) % num_partitions


def _as_bytes(key: bytes | str) -> bytes:
    return key.encode() if isinstance(key, str) else bytes(key)


@functools.lru_cache(maxsize=256)
def _ring(partitions: tuple[int, ...]) -> tuple[list[int], list[int]]:
    points = sorted((to_positive(murmur2(f"{p}#{v}".encode())), p)
                    for p in partitions for v in range(CONSISTENT_VNODES))
    return [h for h, _ in points], [p for _, p in points]


def available(num_partitions: int, exclude: Sequence[int]) -> tuple[int, ...]:
    """Partitions a message may go to; all of them when the exclusion would leave none."""
    excluded = set(exclude)
    out = tuple(p for p in range(num_partitions) if p not in excluded)
    if not out and num_partitions > 0:
        log.warning("ykafka.partitioner.all_excluded", partitions=num_partitions, exclude=sorted(excluded))
        return tuple(range(num_partitions))
    return out


class Picker:
    """Chooses a partition for one topic under one strategy; cheap to rebuild when either changes."""

    def __init__(self, strategy: str, num_partitions: int, exclude: Sequence[int] = ()) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown partitioner {strategy!r}")
        self.strategy = strategy
        self.num_partitions = num_partitions
        self.partitions = available(num_partitions, exclude)
        self._count = len(self.partitions)
        self._rr = itertools.count(random.randrange(max(self._count, 1)))
        self._sticky = random.choice(self.partitions) if self.partitions else 0
        self._sticky_until = 0.0

    def _stick(self) -> int:
        now = time.monotonic()
        if now >= self._sticky_until:
            self._sticky = random.choice(self.partitions)
            self._sticky_until = now + STICKY_SWITCH_S
        return self._sticky

    def __call__(self, key: bytes | str | None) -> int:
        """The partition for ``key`` (-1 when the topic's partition count is not known yet)."""
        if not self._count:
            return -1
        strategy = self.strategy
        if strategy == "murmur2":
            if key is None:
                return self._stick()
            return self.partitions[to_positive(murmur2(_as_bytes(key))) % self._count]
        if strategy == "consistent":
            if key is None:
                return self._stick()
            hashes, owners = _ring(self.partitions)
            idx = bisect.bisect_left(hashes, to_positive(murmur2(_as_bytes(key))))
            return owners[idx % len(owners)]
        if strategy == "random":
            return self.partitions[random.randrange(self._count)]
        if strategy == "round_robin":
            return self.partitions[next(self._rr) % self._count]
        return self._stick()  # sticky: keys ignored, like Java's UniformStickyPartitioner


def needs_python(strategy: str, exclude: Sequence[int]) -> bool:
    """False when librdkafka's ``murmur2_random`` does exactly what the strategy asks."""
    return strategy != "murmur2" or bool(exclude)
