"""Trace overhead on the producer: raw confluent-kafka vs the same loop with the Tracer hooks, same run.

The ykafka Producer does not call the Tracer yet, so this measures what its hooks will do per message on
top of the raw loop (canonical ``produce(..., on_delivery=cb)`` + ``poll(0)``, ``flush`` at the end, time
includes the flush):

* ``off``  — trace disabled for the topic: the per-topic rate is cached, one falsy check per message;
* ``1%``   — a sampling decision per message (one ``random()``); for the sampled 1 %: an id in the
             ``ykafka-trace`` header and a wrapped delivery callback emitting ``produced`` + ``acked``
             (partition, offset, latency);
* ``100%`` — every message: the wrapped callback and its two events (no header: at rate 1.0 a message
             is identified by its coordinates), shipped by the background sink to ``__ykafka_trace`` on the
             same broker while the benchmark runs.

Rounds alternate the four modes; figures are medians. Starts a private Tansu broker on a free port
(or uses ``--bootstrap``).

    python bench/trace_overhead.py [--messages 100000] [--size 100] [--rounds 3]

Last line: RESULT {"raw_msgs_s", "off_ratio", "sampled_1pct_ratio", "full_ratio", ...}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402

from tests.dr_fixtures import Broker  # noqa: E402
from ykafka.tracing import Tracer  # noqa: E402

SETTINGS = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 1_000_000,
            "log_level": 3}


def run_raw(producer: Any, topic: str, messages: int, value: bytes) -> float:
    delivered = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            delivered[0] += 1

    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                produce(topic, value, None, -1, on_delivery, None, 0, None)  # the ykafka Producer's call shape
                break
            except BufferError:
                poll(0.01)
        poll(0)
    left = producer.flush(60)
    elapsed = time.perf_counter() - start
    if left or delivered[0] != messages:
        raise RuntimeError(f"{delivered[0]} of {messages} delivered, {left} left")
    return messages / elapsed


def run_traced(producer: Any, tracer: Tracer, topic: str, messages: int, value: bytes,
               effective: dict[str, Any]) -> float:
    """The raw loop plus exactly what the Producer's trace hooks do per message."""
    delivered = [0]
    rate = tracer.rate(effective)  # per topic, once per config version
    sample, wrap = tracer.sample, tracer.wrap_delivery

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            delivered[0] += 1

    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for _ in range(messages):
        headers: Any = None
        callback = on_delivery
        if rate:
            mid = sample(rate)
            if mid is not None:
                if mid:  # "" at rate 1.0: identified by its coordinates once acked, no header needed
                    headers = [("ykafka-trace", mid)]
                callback = wrap(on_delivery, topic, None, mid)
        while True:
            try:
                produce(topic, value, None, -1, callback, None, 0, headers)
                break
            except BufferError:
                poll(0.01)
        poll(0)
    left = producer.flush(60)
    elapsed = time.perf_counter() - start
    if left or delivered[0] != messages:
        raise RuntimeError(f"{delivered[0]} of {messages} delivered, {left} left")
    return messages / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", default=None, help="use this cluster instead of a private Tansu broker")
    args = parser.parse_args()
    value = b"x" * args.size
    broker = None
    if args.bootstrap is None:
        broker = Broker("bench-trace", Path(tempfile.mkdtemp(prefix="ykafka-bench-"))).start()
    bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
    try:
        producer = Producer({"bootstrap.servers": bootstrap, **SETTINGS})
        tracer = Tracer.for_client("bench", "127.0.0.1", {"bootstrap.servers": bootstrap}, app="bench")
        modes = {
            "raw": lambda t: run_raw(producer, t, args.messages, value),
            "off": lambda t: run_traced(producer, tracer, t, args.messages, value, {"trace.enabled": False}),
            "1pct": lambda t: run_traced(producer, tracer, t, args.messages, value,
                                         {"trace.enabled": True, "trace.sample.rate": 0.01}),
            "full": lambda t: run_traced(producer, tracer, t, args.messages, value,
                                         {"trace.enabled": True, "trace.sample.rate": 1.0}),
        }
        run_raw(producer, "bench-trace-warmup", 5000, value)
        figures: dict[str, list[float]] = {name: [] for name in modes}
        for round_ in range(args.rounds):
            for name, fn in modes.items():
                rate = fn(f"bench-trace-{name}-{round_}")
                figures[name].append(rate)
                print(f"round {round_} {name:>4}: {rate:,.0f} msgs/s", flush=True)
        tracer.flush(60)
        stats = tracer.stats()
        tracer.close()
        med = {name: statistics.median(v) for name, v in figures.items()}
        result = {
            "raw_msgs_s": round(med["raw"]),
            "off_ratio": round(med["off"] / med["raw"], 3),
            "sampled_1pct_ratio": round(med["1pct"] / med["raw"], 3),
            "full_ratio": round(med["full"] / med["raw"], 3),
            "off_msgs_s": round(med["off"]), "sampled_1pct_msgs_s": round(med["1pct"]),
            "full_msgs_s": round(med["full"]),
            "trace_events_delivered": stats["delivered"], "trace_events_dropped": stats["dropped_full"]
            + stats["dropped_undeliverable"],
            "messages": args.messages, "rounds": args.rounds, "size": args.size,
            "measured": "raw confluent-kafka loop + Tracer hooks (ykafka Producer has no trace hooks yet)",
        }
    finally:
        if broker is not None:
            broker.kill()
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
