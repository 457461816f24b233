"""Producer throughput: raw confluent-kafka vs ykafka, same broker, same process run.

Starts what it needs on free ports (a Tansu broker, the config service, the MetaServer; seeded with one
app), stopped by pid at the end. Both sides send the same messages with the same librdkafka settings
(ykafka's defaults: acks=all, idempotence, linger.ms=5, batch.size=1000000, murmur2_random) in the
canonical confluent-kafka loop: ``produce(..., on_delivery=cb)`` then ``poll(0)``, ``poll`` on a full
queue, ``flush`` at the end; the time includes the flush, so every message is acknowledged. ykafka runs with
a grant and its hot config subscribed (global + the topic's namespace). Rounds alternate raw / ykafka; the
figures are medians.

    python bench/producer_throughput.py [--messages 200000] [--size 100] [--rounds 3] [--keys N] [--quick]

Last line: RESULT {"raw_msgs_s": ..., "ykafka_msgs_s": ..., "ratio": ...}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer as RawProducer  # noqa: E402

from bench._loop import produce_loop  # noqa: E402
from tests.support import local_stack  # noqa: E402
from ykafka import Producer  # noqa: E402
from ykafka.logs import configure  # noqa: E402

RAW_SETTINGS = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 1_000_000,
                "compression.type": "none", "partitioner": "murmur2_random"}


def run(producer: Any, topic: str, messages: int, value: bytes, keys: int = 0, positional: bool = False) -> float:
    return produce_loop(producer, topic, messages, value, keys, positional=positional)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--positional", action="store_true",
                        help="call produce() positionally (confluent-kafka's fastest form) instead of by keyword")
    parser.add_argument("--keys", type=int, default=0, help="keyed sends over this many keys (default: no key)")
    parser.add_argument("--quick", action="store_true", help="20,000 messages, one round (the suite's check)")
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu", help="the cluster kind")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.rounds = 20_000, 1
    configure("warning")
    value = b"x" * args.size
    with local_stack(["dc-a", "control"], broker=args.broker) as bench:
        raw = RawProducer({"bootstrap.servers": bench.bootstrap(), **RAW_SETTINGS})
        yk = Producer(bench.client_config())
        topic = "bench-throughput"
        for producer in (raw, yk):  # warm up: connections, metadata, the topic's namespace subscribed
            run(producer, topic, 2000, value)
        assert yk.runtime.apollo is not None and f"ykafka.topic.{topic}" in yk.runtime.apollo.namespaces
        raw_rates: list[float] = []
        yk_rates: list[float] = []
        for _ in range(args.rounds):
            raw_rates.append(run(raw, topic, args.messages, value, args.keys, args.positional))
            yk_rates.append(run(yk, topic, args.messages, value, args.keys, args.positional))
            print(f"round: raw {raw_rates[-1]:,.0f} msg/s  ykafka {yk_rates[-1]:,.0f} msg/s", flush=True)
        yk.close()
        raw_s, yk_s = statistics.median(raw_rates), statistics.median(yk_rates)
        result = {"raw_msgs_s": round(raw_s), "ykafka_msgs_s": round(yk_s), "ratio": round(yk_s / raw_s, 3),
                  "messages": args.messages, "size": args.size, "rounds": args.rounds, "keys": args.keys,
                  "call": "positional" if args.positional else "keyword"}
    print("RESULT " + json.dumps({**result, "broker": args.broker}), flush=True)


if __name__ == "__main__":
    main()
