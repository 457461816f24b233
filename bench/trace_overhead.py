"""Trace overhead on the producer: raw confluent-kafka vs the ykafka Producer with trace off / 1 % / 100 %.

Same process run, same broker, same librdkafka settings (acks=all, idempotence, linger.ms=5), the
canonical loop ``produce(..., on_delivery=cb)`` + ``poll(0)``, ``flush`` at the end (time includes it):

* ``raw``  — confluent-kafka;
* ``off``  — ``ykafka.Producer`` (local mode, disk spill / failover off: ``ykafka.dr.enabled=false``, their
             cost is ``dr_off_ratio``) whose topic has trace off (``trace.enabled=false``);
* ``1%``   — ``trace.sample.rate=0.01``: one ``random()`` per message; a sampled message gets an id in the
             ``ykafka-trace`` header and a wrapped delivery callback emitting ``produced`` + ``acked``;
* ``100%`` — every message traced (no header: identified by its coordinates once acked), events shipped by
             the background sink to ``__ykafka_trace`` on the same broker while the benchmark runs.

Also measured, as ``hooks_*``: the raw loop plus the Tracer hooks alone (what tracing costs without the
Producer's own overhead). Rounds alternate the modes; figures are medians. Starts a private Tansu broker
on a free port (or uses ``--bootstrap``).

    python bench/trace_overhead.py [--messages 100000] [--size 100] [--rounds 3]

Last line: RESULT {"raw_msgs_s", "off_ratio", "sampled_1pct_ratio", "full_ratio", "hooks_...", ...}
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
from ykafka import Producer as YProducer  # noqa: E402
from ykafka.logs import configure  # noqa: E402
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
    configure("warning")
    value = b"x" * args.size
    broker = None
    if args.bootstrap is None:
        broker = Broker("bench-trace", Path(tempfile.mkdtemp(prefix="ykafka-bench-"))).start()
    bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
    try:
        producer = Producer({"bootstrap.servers": bootstrap, **SETTINGS})
        tracer = Tracer.for_client("bench", "127.0.0.1", {"bootstrap.servers": bootstrap}, app="bench")
        # disk spill / failover (ykafka.dr.enabled) puts every send through its engine: measured by its own
        # benchmark; here it is off so that the figures are those of tracing (its cost shown as dr_off_ratio)
        common = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000, "log_level": 3,
                  "ykafka.dr.enabled": False}
        ykafka = {
            "dr_off": YProducer({**common, "ykafka.dr.enabled": True, "trace.enabled": False}),
            "off": YProducer({**common, "trace.enabled": False}),
            "1pct": YProducer({**common, "trace.enabled": True, "trace.sample.rate": 0.01}),
            "full": YProducer({**common, "trace.enabled": True, "trace.sample.rate": 1.0}),
        }
        modes = {
            "raw": lambda t: run_raw(producer, t, args.messages, value),
            "off": lambda t: run_raw(ykafka["off"], t, args.messages, value),
            "dr_off": lambda t: run_raw(ykafka["dr_off"], t, args.messages, value),
            "1pct": lambda t: run_raw(ykafka["1pct"], t, args.messages, value),
            "full": lambda t: run_raw(ykafka["full"], t, args.messages, value),
            "hooks_off": lambda t: run_traced(producer, tracer, t, args.messages, value, {"trace.enabled": False}),
            "hooks_1pct": lambda t: run_traced(producer, tracer, t, args.messages, value,
                                               {"trace.enabled": True, "trace.sample.rate": 0.01}),
            "hooks_full": lambda t: run_traced(producer, tracer, t, args.messages, value,
                                               {"trace.enabled": True, "trace.sample.rate": 1.0}),
        }
        run_raw(producer, "bench-trace-warmup", 5000, value)
        for name, yp in ykafka.items():
            run_raw(yp, f"bench-trace-warmup-{name}", 5000, value)
        figures: dict[str, list[float]] = {name: [] for name in modes}
        for round_ in range(args.rounds):
            for name, fn in modes.items():
                rate = fn(f"bench-trace-{name}-{round_}")
                figures[name].append(rate)
                print(f"round {round_} {name:>10}: {rate:,.0f} msgs/s", flush=True)
        tracer.flush(60)
        stats = tracer.stats()
        tracer.close()
        traced = ykafka["full"]._obs.tracer().stats()
        for yp in ykafka.values():
            yp.close()
        med = {name: statistics.median(v) for name, v in figures.items()}
        result = {
            "raw_msgs_s": round(med["raw"]),
            "off_ratio": round(med["off"] / med["raw"], 3),
            "sampled_1pct_ratio": round(med["1pct"] / med["raw"], 3),
            "full_ratio": round(med["full"] / med["raw"], 3),
            "off_msgs_s": round(med["off"]), "sampled_1pct_msgs_s": round(med["1pct"]),
            "full_msgs_s": round(med["full"]),
            "dr_off_ratio": round(med["dr_off"] / med["raw"], 3),
            "hooks_off_ratio": round(med["hooks_off"] / med["raw"], 3),
            "hooks_1pct_ratio": round(med["hooks_1pct"] / med["raw"], 3),
            "hooks_full_ratio": round(med["hooks_full"] / med["raw"], 3),
            "full_trace_events_delivered": traced.get("delivered", 0),
            "trace_events_dropped": stats["dropped_full"] + stats["dropped_undeliverable"]
            + traced.get("dropped_full", 0) + traced.get("dropped_undeliverable", 0),
            "messages": args.messages, "rounds": args.rounds, "size": args.size,
            "measured": "ykafka.Producer (local mode) vs raw confluent-kafka; hooks_*: raw loop + Tracer hooks",
        }
    finally:
        if broker is not None:
            broker.kill()
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
