"""Clients dropped without ``close()`` are collected (issue 40, item 1), measured in a process of its own:
``python -m tests.collect_child KIND COUNT BOOTSTRAP TOPIC CACHE_DIR``.

Makes COUNT clients of KIND (``producer``, ``consumer``, ``aio_producer``, ``aio_consumer``, ``serializing_producer``,
``deserializing_consumer``), each with traffic (a producer sends one message and waits for its delivery, a consumer
reads one message of TOPIC), and drops each without ``close()``. Prints one JSON line: threads (``/proc/self/task``),
descriptors (``/proc/self/fd``) and RSS (kB) after a few clients were made and dropped (the process's one-time
threads and imports) and after the loop once the reaper is idle; the peak thread count during the loop; how many
clients are still alive (weak references; ``gc`` finds none); how many messages the clients saw.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from confluent_kafka.serialization import StringDeserializer, StringSerializer

from ykafka import Consumer, DeserializingConsumer, Producer, SerializingProducer, lifecycle
from ykafka.aio import AIOConsumer, AIOProducer
from ykafka.transport import TopicPartition

WARM_UP = 5


def resources() -> tuple[int, int, int]:
    with open("/proc/self/statm") as fh:
        rss_kb = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd")), rss_kb


def main(kind: str, count: int, bootstrap: str, topic: str, cache: str) -> None:
    # not idempotent: an idempotent producer waits ~0.1 s for its producer id, which would be most of the loop
    base = {"bootstrap.servers": bootstrap, "ykafka.cache.dir": cache, "log_level": 0, "producer.idempotence": False}
    refs: list[weakref.ref[Any]] = []
    seen = [0]

    def producer(i: int) -> None:
        p = Producer(base)
        p.produce(topic, f"p{i}".encode(), on_delivery=lambda err, _m: seen.__setitem__(0, seen[0] + (err is None)))
        assert p.flush(30) == 0
        refs.append(weakref.ref(p))

    def serializing_producer(i: int) -> None:
        p = SerializingProducer({**base, "key.serializer": StringSerializer(), "value.serializer": StringSerializer()})
        p.produce(topic, key=f"k{i}", value=f"s{i}",
                  on_delivery=lambda err, _m: seen.__setitem__(0, seen[0] + (err is None)))
        assert p.flush(30) == 0
        refs.append(weakref.ref(p))

    def read_one(c: Any) -> None:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                seen[0] += 1
                return

    def consumer(_i: int) -> None:
        c = Consumer({**base, "group.id": "collect"})
        read_one(c)
        refs.append(weakref.ref(c))

    def deserializing_consumer(_i: int) -> None:
        c = DeserializingConsumer({**base, "group.id": "collect", "value.deserializer": StringDeserializer()})
        read_one(c)
        refs.append(weakref.ref(c))

    async def aio_producer(i: int) -> None:
        p = AIOProducer(base)
        delivered = await (await p.produce(topic, f"a{i}".encode()))
        seen[0] += delivered.error() is None
        refs.append(weakref.ref(p))

    async def aio_consumer(_i: int) -> None:
        c = AIOConsumer({**base, "group.id": "collect"})
        await c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = await c.poll(0.5)
            if msg is not None and msg.error() is None:
                seen[0] += 1
                break
        refs.append(weakref.ref(c))

    makers: dict[str, Callable[[int], Any]] = {
        "producer": producer, "serializing_producer": serializing_producer, "consumer": consumer,
        "deserializing_consumer": deserializing_consumer, "aio_producer": aio_producer, "aio_consumer": aio_consumer}
    make = makers[kind]

    async def run_all() -> dict[str, Any]:
        async def one(i: int) -> None:
            result = make(i)
            if asyncio.iscoroutine(result):
                await result

        def settle() -> None:
            # three rounds: a collected asyncio client lets its sync client go once its poller has stopped, and
            # that one is collected by the next pass
            for _ in range(3):
                gc.collect()
                deadline = time.monotonic() + 30
                while lifecycle.reaping() and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(0.3)  # librdkafka's threads end just after its handle is destroyed

        for i in range(WARM_UP):  # one-time threads (the reaper, the producer-id worker, asyncio's pool), imports
            await one(-1 - i)
            await asyncio.sleep(0)
        settle()
        before = resources()
        peak = before[0]
        started = time.monotonic()
        for i in range(1, count + 1):
            await one(i)
            await asyncio.sleep(0)  # the loop runs the callbacks a dropped asyncio client left
            peak = max(peak, resources()[0])
        elapsed = time.monotonic() - started
        settle()
        after = resources()
        alive = sum(ref() is not None for ref in refs)
        names = sorted({t.name.rstrip("0123456789_-") for t in threading.enumerate()})
        return {"kind": kind, "count": count, "thread_names": names, "before": before, "after": after,
                "peak_threads": peak,
                "alive": alive, "seen": seen[0] - WARM_UP, "elapsed_s": round(elapsed, 1)}

    report = asyncio.run(run_all())
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
