"""asyncio throughput: ykafka's AIOProducer vs confluent-kafka's AIOProducer, and async handlers vs ideal.

Starts what it needs on free ports (a Tansu broker, the config service, the MetaServer; seeded with one
app), stopped by pid at the end.

- Producer: both sides run the same asyncio loop, ``fut = await producer.produce(topic, value=...)`` for
  every message, then wait for every future (every message acknowledged) and flush. Same librdkafka
  settings (ykafka's defaults). Rounds alternate; figures are medians.
- Consumer: ``AIOConsumer.run`` with an ``async def`` handler that awaits ``asyncio.sleep(0.005)``, 64 in
  flight (``consumer.workers=64``, ordering ``none``); ideal = 64 / 5 ms = 12,800 msgs/s. Timed from the
  first handled message to the last.

- Consumer peer: the same filled topic read to its end with ``await consumer.consume(500, 1.0)`` by
  confluent-kafka's ``AIOConsumer`` and ykafka's (its defaults: metrics and client reports on), each in a group
  of its own, timed from the first message (median of the rounds).

    python bench/aio_throughput.py [--messages 100000] [--consume 20000] [--peer-messages 200000] [--rounds 3]
        [--broker tansu|kafka] [--quick]

Last line: RESULT {"confluent_aio_msgs_s": ..., "ykafka_aio_msgs_s": ..., "ratio": ...,
                   "async_handler_msgs_s": ..., "async_handler_ideal_msgs_s": 12800, "async_handler_ratio": ...}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer as RawProducer  # noqa: E402
from confluent_kafka.aio import AIOConsumer as ConfluentAIOConsumer  # noqa: E402
from confluent_kafka.aio import AIOProducer as ConfluentAIOProducer  # noqa: E402

from tests.support import local_stack, tansu_group_quirk  # noqa: E402
from ykafka.aio import AIOConsumer, AIOProducer  # noqa: E402
from ykafka.logs import configure  # noqa: E402

RAW_SETTINGS = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 1_000_000,
                "compression.type": "none", "partitioner": "murmur2_random"}
HANDLER_S = 0.005
IN_FLIGHT = 64


async def produce_all(producer: Any, topic: str, messages: int, value: bytes) -> float:
    started = time.perf_counter()
    futures = []
    for _ in range(messages):
        futures.append(await producer.produce(topic, value=value))
        if len(futures) >= 50_000:  # bound the memory of pending futures
            await asyncio.gather(*futures)
            futures = []
    await asyncio.gather(*futures)
    await producer.flush()
    return messages / (time.perf_counter() - started)


async def producer_round(bench: Any, messages: int, value: bytes) -> tuple[float, float]:
    confluent = ConfluentAIOProducer({"bootstrap.servers": bench.bootstrap(), **RAW_SETTINGS})
    ykafka = AIOProducer(bench.client_config())
    topic = "bench-aio"
    for producer in (confluent, ykafka):  # warm up: connections, metadata, the topic's namespace
        await produce_all(producer, topic, 1000, value)
    raw_rate = await produce_all(confluent, topic, messages, value)
    yk_rate = await produce_all(ykafka, topic, messages, value)
    await confluent.close()
    await ykafka.close()
    return raw_rate, yk_rate


def fill(bootstrap: str, topic: str, messages: int) -> None:
    producer = RawProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(30) == 0


async def consumer_round(bench: Any, messages: int) -> float:
    topic = f"bench-aio-consume-{uuid.uuid4().hex[:6]}"
    fill(bench.bootstrap(), topic, messages)
    consumer = AIOConsumer({"bootstrap.servers": bench.bootstrap(), "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                            "heartbeat.interval.ms": 500, "ykafka.cache.dir": str(bench.home / "consumer"),
                            "consumer.workers": IN_FLIGHT, "consumer.ordering": "none"})
    seen: set[bytes] = set()
    first: list[float] = []
    last: list[float] = []

    async def handler(msg: Any) -> None:
        if not first:
            first.append(time.perf_counter())
        await asyncio.sleep(HANDLER_S)
        seen.add(msg.value())
        if len(seen) >= messages:
            last.append(time.perf_counter())
            consumer.stop()

    await asyncio.wait_for(consumer.run(handler, [topic]), timeout=120)
    await consumer.close()
    assert len(seen) == messages, f"handled {len(seen)} of {messages}"
    return messages / (last[0] - first[0])


async def drain(consumer: Any, topic: str, messages: int) -> float:
    """``await consumer.consume(500, 1.0)`` until ``messages`` are read (timed from the first message: the
    group's join is not the loop's cost); msgs/s."""
    await consumer.subscribe([topic])
    got, started = 0, 0.0
    deadline = time.monotonic() + 120
    while got < messages:
        if time.monotonic() > deadline:
            raise RuntimeError(f"read {got} of {messages} in 120 s")
        batch = await consumer.consume(500, 1.0)
        if batch and not started:
            started = time.perf_counter()
        got += sum(1 for m in batch if m.error() is None)
    rate = messages / (time.perf_counter() - started)
    await consumer.close()
    return rate


async def consume_peer_round(bench: Any, topic: str, messages: int, ykafka_first: bool) -> tuple[float, float]:
    """The same topic read to its end by confluent-kafka's ``AIOConsumer`` and ykafka's, each in a group of its
    own, with the same fetch settings (ykafka's defaults otherwise: its metrics and client reports on); which
    reads first alternates from round to round."""
    common = {"bootstrap.servers": bench.bootstrap(), "auto.offset.reset": "earliest", "enable.auto.commit": True,
              **tansu_group_quirk(bench.bootstrap())}
    rates: dict[str, float] = {}
    for side in (["ykafka", "raw"] if ykafka_first else ["raw", "ykafka"]):
        consumer: Any = ConfluentAIOConsumer({**common, "group.id": f"bench-raw-{uuid.uuid4().hex[:6]}"}) \
            if side == "raw" else AIOConsumer({**common, "group.id": f"bench-yk-{uuid.uuid4().hex[:6]}",
                                               "ykafka.cache.dir": str(bench.home / "consumer-peer")})
        rates[side] = await drain(consumer, topic, messages)
    return rates["raw"], rates["ykafka"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--consume", type=int, default=20_000)
    parser.add_argument("--peer-messages", type=int, default=200_000,
                        help="messages each AIOConsumer reads in the consumer peer rounds")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes, one round (the suite's check)")
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu", help="the cluster kind")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.consume, args.rounds, args.peer_messages = 5_000, 2_000, 1, 5_000
    configure("warning")
    value = b"x" * args.size
    with local_stack(["dc-a", "control"], broker=args.broker) as bench:
        raw_rates: list[float] = []
        yk_rates: list[float] = []
        for _ in range(args.rounds):
            raw_rate, yk_rate = asyncio.run(producer_round(bench, args.messages, value))
            raw_rates.append(raw_rate)
            yk_rates.append(yk_rate)
            print(f"producer round: confluent AIOProducer {raw_rate:,.0f}/s, ykafka AIOProducer {yk_rate:,.0f}/s")
        peer_topic = f"bench-aio-peer-{uuid.uuid4().hex[:6]}"
        fill(bench.bootstrap(), peer_topic, args.peer_messages)
        raw_c: list[float] = []
        yk_c: list[float] = []
        for i in range(args.rounds):
            raw_rate, yk_rate = asyncio.run(consume_peer_round(bench, peer_topic, args.peer_messages, i % 2 == 1))
            raw_c.append(raw_rate)
            yk_c.append(yk_rate)
            print(f"consumer round: confluent AIOConsumer {raw_rate:,.0f}/s, ykafka AIOConsumer {yk_rate:,.0f}/s")
        handler_rate = asyncio.run(consumer_round(bench, args.consume))
        ideal = IN_FLIGHT / HANDLER_S
        print(f"async handler: {handler_rate:,.0f}/s of ideal {ideal:,.0f}/s")
    raw, yk = statistics.median(raw_rates), statistics.median(yk_rates)
    print("RESULT " + json.dumps({
        "confluent_aio_msgs_s": round(raw), "ykafka_aio_msgs_s": round(yk), "ratio": round(yk / raw, 3),
        "async_handler_msgs_s": round(handler_rate), "async_handler_ideal_msgs_s": round(ideal),
        "async_handler_ratio": round(handler_rate / ideal, 3), "messages": args.messages,
        "consumed": args.consume, "confluent_aio_consume_msgs_s": round(statistics.median(raw_c)),
        "ykafka_aio_consume_msgs_s": round(statistics.median(yk_c)),
        "consume_ratio": round(statistics.median(yk_c) / statistics.median(raw_c), 3),
        "consume_messages": args.peer_messages, "broker": args.broker}))


if __name__ == "__main__":
    main()
