"""Trace overhead on the producer: raw confluent-kafka vs the ykafka Producer with trace off / 1 % / 100 %.

Same process run, same broker, same librdkafka settings (acks=all, idempotence, linger.ms=5), the
canonical loop ``produce(..., on_delivery=cb)`` + ``poll(0)``, ``flush`` at the end (time includes it;
bench/_loop.py, shared with bench/producer_throughput.py):

* ``raw``  — confluent-kafka;
* ``off``  — ``ykafka.Producer`` (local mode, defaults: disk spill / failover on) whose topic has trace off
             (``trace.enabled=false``); ``dr_disabled_ratio``: the same with ``ykafka.dr.enabled=false``;
* ``1%``   — ``trace.sample.rate=0.01``: one ``random()`` per message; a sampled message gets an id in the
             ``ykafka-trace`` header and a wrapped delivery callback emitting ``produced`` + ``acked``;
* ``100%`` — every message traced (no header: identified by its coordinates once acked), events shipped by
             the background sink to ``__ykafka_trace`` on the same broker while the benchmark runs.

Also measured, as ``hooks_*``: the raw loop plus the Tracer hooks alone (what tracing costs without the
Producer's own overhead). Rounds alternate the modes; figures are medians. Starts a private Tansu broker
on a free port (or uses ``--bootstrap``).

    python bench/trace_overhead.py [--messages 100000] [--size 100] [--rounds 3] [--quick]

Last line: RESULT {"raw_msgs_s", "off_ratio", "sampled_1pct_ratio", "full_ratio", "hooks_...", ...}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402

from bench._loop import produce_loop  # noqa: E402
from tests.support import Broker  # noqa: E402
from ykafka import Producer as YProducer  # noqa: E402
from ykafka.logs import configure  # noqa: E402
from ykafka.tracing import Tracer  # noqa: E402

SETTINGS = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 1_000_000,
            "log_level": 3}


def run_raw(producer: Any, topic: str, messages: int, value: bytes, positional: bool = False) -> float:
    return produce_loop(producer, topic, messages, value, positional=positional)


def run_traced(producer: Any, tracer: Tracer, topic: str, messages: int, value: bytes,
               effective: dict[str, Any], positional: bool = False) -> float:
    """The raw loop plus exactly what the Producer's trace hooks do per message."""
    rate = tracer.rate(effective)  # per topic, once per config version
    sample, wrap = tracer.sample, tracer.wrap_delivery

    def prepare(callback: Any) -> tuple[Any, Any]:
        if rate:
            mid = sample(rate)
            if mid is not None:
                # "" at rate 1.0: identified by its coordinates once acked, no header needed
                return wrap(callback, topic, None, mid), ([("ykafka-trace", mid)] if mid else None)
        return callback, None

    return produce_loop(producer, topic, messages, value, prepare=prepare, positional=positional)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--positional", action="store_true",
                        help="call produce() positionally (confluent-kafka's fastest form) instead of by keyword")
    parser.add_argument("--bootstrap", default=None, help="use this cluster instead of a private broker")
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="tansu",
                        help="the private broker's kind (without --bootstrap)")
    parser.add_argument("--only", default=None, help="comma-separated modes to run (default: all; raw always)")
    parser.add_argument("--quick", action="store_true", help="10,000 messages, one round (the suite's check)")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.rounds = 10_000, 1
    configure("warning")
    value = b"x" * args.size
    broker = None
    if args.bootstrap is None:
        broker = Broker("bench-trace", Path(tempfile.mkdtemp(prefix="ykafka-bench-")), broker=args.broker).start()
    bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
    try:
        producer = Producer({"bootstrap.servers": bootstrap, **SETTINGS})
        tracer = Tracer.for_client("bench", "127.0.0.1", {"bootstrap.servers": bootstrap}, app="bench")
        # the Producer's defaults, disk spill / failover included (dr_disabled: without that engine)
        common = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000, "log_level": 3}
        ykafka = {
            "dr_disabled": YProducer({**common, "ykafka.dr.enabled": False, "trace.enabled": False}),
            "off": YProducer({**common, "trace.enabled": False}),
            "1pct": YProducer({**common, "trace.enabled": True, "trace.sample.rate": 0.01}),
            "full": YProducer({**common, "trace.enabled": True, "trace.sample.rate": 1.0}),
        }
        modes = {
            "raw": lambda t: run_raw(producer, t, args.messages, value, args.positional),
            "off": lambda t: run_raw(ykafka["off"], t, args.messages, value, args.positional),
            "dr_disabled": lambda t: run_raw(ykafka["dr_disabled"], t, args.messages, value, args.positional),
            "1pct": lambda t: run_raw(ykafka["1pct"], t, args.messages, value, args.positional),
            "full": lambda t: run_raw(ykafka["full"], t, args.messages, value, args.positional),
            "hooks_off": lambda t: run_traced(producer, tracer, t, args.messages, value, {"trace.enabled": False},
                                                  args.positional),
            "hooks_1pct": lambda t: run_traced(producer, tracer, t, args.messages, value,
                                               {"trace.enabled": True, "trace.sample.rate": 0.01}, args.positional),
            "hooks_full": lambda t: run_traced(producer, tracer, t, args.messages, value,
                                               {"trace.enabled": True, "trace.sample.rate": 1.0}, args.positional),
        }
        if args.only:
            keep = {"raw", *args.only.split(",")}
            modes = {name: fn for name, fn in modes.items() if name in keep}
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

        def ratio(name: str) -> float | None:
            return round(med[name] / med["raw"], 3) if name in med else None

        def rate(name: str) -> int | None:
            return round(med[name]) if name in med else None

        result = {
            "raw_msgs_s": rate("raw"),
            "off_ratio": ratio("off"),
            "sampled_1pct_ratio": ratio("1pct"),
            "full_ratio": ratio("full"),
            "off_msgs_s": rate("off"), "sampled_1pct_msgs_s": rate("1pct"),
            "full_msgs_s": rate("full"),
            "dr_disabled_ratio": ratio("dr_disabled"),
            "hooks_off_ratio": ratio("hooks_off"),
            "hooks_1pct_ratio": ratio("hooks_1pct"),
            "hooks_full_ratio": ratio("hooks_full"),
            "full_trace_events_delivered": traced.get("delivered", 0),
            "trace_events_dropped": stats["dropped_full"] + stats["dropped_undeliverable"]
            + traced.get("dropped_full", 0) + traced.get("dropped_undeliverable", 0),
            "messages": args.messages, "rounds": args.rounds, "size": args.size,
            "call": "positional" if args.positional else "keyword",
            "measured": "ykafka.Producer (local mode) vs raw confluent-kafka; hooks_*: raw loop + Tracer hooks",
        }
    finally:
        if broker is not None:
            broker.close()
    print("RESULT " + json.dumps({**result, "broker": args.broker if args.bootstrap is None else "given"}))


if __name__ == "__main__":
    main()
